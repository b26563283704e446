#include "net/egress_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <csignal>

#include "base/cleanup.h"
#include "net/address_ranges.h"
#include "net/fd_stream.h"
#include "net/firewall.h"
#include "net/network.h"
#include "net/resolver.h"
#include "net/tls_sni.h"
#include "net/tls_stream.h"

namespace warren::net {

namespace http = boost::beast::http;
using boost::system::error_code;

constexpr int kIdleMs = 120000;  // a client or upstream silent this long is dropped
constexpr int kSniWaitMs = 10000;
constexpr size_t kHeaderLimit = 64 * 1024;

struct EgressProxy::Conn {
  uint32_t src = 0;
  bool peer = false;  // another node's proxy (the package mirror), not a sandbox
  std::string sandbox;
  UniqueFd client;
  std::atomic<int> upstream{-1};
  std::mutex mu;
  std::string host;  // what it is talking to now (empty between requests)
  uint16_t port = 0;
};

namespace {

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ParseHostPort(std::string_view s, uint16_t default_port, std::string* host, uint16_t* port) {
  *port = default_port;
  std::string_view h = s;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) return false;
    h = s.substr(0, close + 1);
    s = s.substr(close + 1);
    if (!s.empty()) {
      if (s.front() != ':') return false;
      s.remove_prefix(1);
    } else {
      s = {};
    }
  } else if (size_t colon = s.rfind(':'); colon != std::string_view::npos) {
    h = s.substr(0, colon);
    s = s.substr(colon + 1);
  } else {
    s = {};
  }
  if (!s.empty()) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v == 0 || v > 65535) return false;
    *port = static_cast<uint16_t>(v);
  } else if (default_port == 0) {
    return false;
  }
  *host = std::string(h);
  return !host->empty();
}

struct Url {
  std::string host;
  uint16_t port = 80;
  std::string path;  // origin-form: path and query
};

bool ParseHttpUrl(std::string_view t, Url* u) {
  constexpr std::string_view kScheme = "http://";
  if (t.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(t[i])) != kScheme[i]) return false;
  t.remove_prefix(kScheme.size());
  size_t slash = t.find_first_of("/?");
  std::string_view authority = t.substr(0, slash);
  if (authority.find('@') != std::string_view::npos) return false;  // no userinfo
  if (!ParseHostPort(authority, 80, &u->host, &u->port)) return false;
  u->path = slash == std::string_view::npos ? "/" : std::string(t.substr(slash));
  if (u->path.front() == '?') u->path.insert(0, "/");
  return true;
}

// Hop-by-hop headers (RFC 9110 7.6.1), those the Connection header names, and the proxy's
// own: never forwarded.
void StripHopByHop(http::fields& f) {
  std::string named(f[http::field::connection]);
  for (size_t start = 0; start < named.size();) {
    size_t comma = named.find(',', start);
    if (comma == std::string::npos) comma = named.size();
    std::string token = named.substr(start, comma - start);
    token.erase(0, token.find_first_not_of(" \t"));
    token.erase(token.find_last_not_of(" \t") + 1);
    if (!token.empty() && !boost::beast::iequals(token, "close") &&
        !boost::beast::iequals(token, "keep-alive"))
      f.erase(token);
    start = comma + 1;
  }
  for (auto field :
       {http::field::connection, http::field::keep_alive, http::field::proxy_authorization,
        http::field::proxy_authenticate, http::field::te, http::field::trailer,
        http::field::transfer_encoding, http::field::upgrade, http::field::proxy_connection})
    f.erase(field);
}

// A peer's answer that says the peer failed (not the registry's answer): the proxy's own
// errors carry X-Warren-Error.
bool PeerFailed(const http::response_header<>& h) {
  const unsigned code = h.result_int();
  return !h["X-Warren-Error"].empty() &&
         (code == 400 || code == 403 || code == 407 || code == 502 || code == 503 || code == 504);
}

// Constant-time: a peer's credential is a secret.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// What of a request, beside its path, says which registry's client asks (cache_policy.h).
RequestHints HintsOf(const http::request_header<>& h) {
  RequestHints hints{h[http::field::accept], h[http::field::user_agent]};
  for (const auto& f : h)
    if (boost::beast::iequals(f.name_string().substr(0, 4), "npm-")) hints.npm_headers = true;
  return hints;
}

std::string HostOnly(std::string host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host;
}

// A host for comparison: no brackets, lowercase, no trailing dot.
std::string Canonical(const std::string& host) {
  std::string h = HostOnly(host);
  for (char& ch : h) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (!h.empty() && h.back() == '.') h.pop_back();
  return h;
}

}  // namespace

// A connection to an upstream server: a plain socket, or TLS over it for an intercepted host.
struct Upstream {
  UniqueFd fd;
  std::unique_ptr<ByteStream> stream;
  std::vector<std::string> policy;  // the sandbox's rules when it was opened
};

// One client connection: its requests in order, each answered before the next is read.
struct ProxySession {
  EgressProxy* proxy;
  EgressProxy::Conn* c;
  FdStream client;  // the socket
  boost::beast::flat_buffer buf{kHeaderLimit * 2};
  // What requests are read from and answers written to: the socket, or inside an
  // intercepted tunnel the TLS over it.
  ByteStream* cl = &client;
  boost::beast::flat_buffer* cbuf = &buf;

  void Error(http::status status, const std::string& message) {
    http::response<http::string_body> r{status, 11};
    r.set(http::field::content_type, "text/plain; charset=utf-8");
    r.set(http::field::connection, "close");
    r.set("X-Warren-Error", message);
    r.body() = "warren egress proxy: " + message + "\n";
    r.prepare_payload();
    error_code ec;
    http::write(*cl, r, ec);
  }

  void SetTarget(const std::string& host, uint16_t port, int upstream_fd) {
    std::lock_guard lock(c->mu);
    c->host = host;
    c->port = port;
    c->upstream.store(upstream_fd);
  }
  // Declared after the upstream fd it names, so it is cleared (under the lock a policy
  // change cuts with) before that fd is closed and its number reused.
  struct TargetGuard {
    explicit TargetGuard(ProxySession* session) : s(session) {}
    ProxySession* s;
    ~TargetGuard() { s->SetTarget("", 0, -1); }
  };

  void Run() {
    if (c->peer) return ServePeer();
    for (;;) {
      http::request_parser<http::buffer_body> req;
      req.header_limit(kHeaderLimit);
      req.body_limit(std::numeric_limits<std::uint64_t>::max());
      error_code ec;
      http::read_header(client, buf, req, ec);
      if (ec == http::error::header_limit)
        return Error(http::status::request_header_fields_too_large, "request header too large");
      if (ec) return;
      auto& h = req.get();
      if (h.method() == http::verb::connect) return Tunnel(req);
      Url u;
      if (!ParseHttpUrl(h.target(), &u)) {
        return Error(http::status::bad_request,
                     "give an absolute http:// URL (https:// goes through CONNECT), got `" +
                         std::string(h.target()) + "`");
      }
      // The Host header must name the same host the URL does: a request for an allowed URL
      // cannot be steered to another virtual host.
      if (!HostHeaderAgrees(h, u.host, u.port)) return;
      if (!Forward(req, u, false, nullptr)) return;
    }
  }

  // Another node's proxy asking for keys this node owns: `GET https://host/path` (or http),
  // with the cluster's credential; only what the package cache keeps may be asked, so the
  // listener is no open proxy.
  void ServePeer() {
    const MirrorPeers* peers = proxy->peers_.load();
    for (;;) {
      http::request_parser<http::buffer_body> req;
      req.header_limit(kHeaderLimit);
      req.body_limit(0);
      error_code ec;
      http::read_header(client, buf, req, ec);
      if (ec) return;
      auto& h = req.get();
      std::string_view auth = h[http::field::proxy_authorization];
      if (!peers || auth.substr(0, 7) != "Bearer " ||
          !SameSecret(auth.substr(7), peers->credential()))
        return Error(http::status::proxy_authentication_required,
                     "the package mirror's peers need the cluster's credential");
      // Checked: it is no credential of the request's own (which would keep it uncached).
      h.erase(http::field::proxy_authorization);
      std::string target(h.target());
      bool https = false;
      if (target.size() > 8 && boost::beast::iequals(target.substr(0, 8), "https://")) {
        https = true;
        target = "http://" + target.substr(8);
      }
      Url u;
      if (!ParseHttpUrl(target, &u))
        return Error(http::status::bad_request, "a peer asks for an absolute URL");
      if (https) {
        // ParseHttpUrl defaulted the port to 80: an https URL without one means 443.
        std::string_view authority = std::string_view(target).substr(7);
        authority = authority.substr(0, authority.find_first_of("/?"));
        if (authority.find(':') == std::string_view::npos || authority.back() == ']') u.port = 443;
      }
      const RequestHints hints = HintsOf(h);
      if ((h.method() != http::verb::get && h.method() != http::verb::head) || !req.is_done() ||
          ClassifyRequest(u.path, hints).kind == CacheKind::kNone)
        return Error(http::status::forbidden, "peers ask only for package files and metadata");
      if (!HostHeaderAgrees(h, u.host, u.port)) return;
      if (!Forward(req, u, https, nullptr)) return;
    }
  }

  bool HostHeaderAgrees(const http::request_header<>& h, const std::string& host, uint16_t port) {
    auto host_hdr = h[http::field::host];
    if (host_hdr.empty()) return true;
    std::string hh;
    uint16_t hp;
    if (ParseHostPort(host_hdr, port == 443 ? 443 : 80, &hh, &hp) &&
        Canonical(hh) == Canonical(host) && hp == port)
      return true;
    Error(http::status::bad_request,
          "Host header `" + std::string(host_hdr) + "` does not match the URL's host");
    return false;
  }

  bool Allowed(const std::string& host, uint16_t port, Policy* policy = nullptr) {
    // A peer asks only for package files and metadata (ServePeer checks), on behalf of a
    // sandbox its own node already held to its policy.
    if (c->peer) return true;
    std::string why;
    if (proxy->Allowed(c, host, port, &why, policy)) return true;
    Error(http::status::forbidden, why);
    return false;
  }

  // Connects to an allowed host:port, marked as this connection's target first and checked
  // again after, so a policy change at any moment either sees it or is seen.
  Result<UniqueFd> Open(const std::string& host, uint16_t port, Policy* used = nullptr) {
    Policy local;
    Policy& policy = used ? *used : local;
    if (!Allowed(host, port, &policy)) return Status(Code::kForbidden, "connect", host, "refused");
    SetTarget(host, port, -1);
    auto up = proxy->Connect(HostOnly(host), port, policy);
    if (!up.ok()) {
      Error(up.status().code() == Code::kForbidden ? http::status::forbidden
                                                   : http::status::bad_gateway,
            up.status().ToString());
      return up.status();
    }
    SetTarget(host, port, up->get());
    if (!Allowed(host, port)) {
      SetTarget(host, port, -1);  // before `up` closes and its number is free for reuse
      return Status(Code::kForbidden, "connect", host, "refused");
    }
    return up;
  }

  void Tunnel(http::request_parser<http::buffer_body>& req) {
    std::string host;
    uint16_t port;
    if (!ParseHostPort(req.get().target(), 0, &host, &port))
      return Error(http::status::bad_request, "CONNECT needs host:port");
    if (proxy->Intercepts(host, port)) return Intercept(host, port);
    TargetGuard guard{this};
    auto up = Open(host, port);
    if (!up.ok()) return;
    TargetGuard guard_fd{this};
    const char kOk[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (!client.WriteAll(kOk, sizeof kOk - 1)) return;
    // Whatever the client sent after its CONNECT is the start of the tunnel.
    std::string first(static_cast<const char*>(buf.data().data()), buf.size());
    buf.consume(buf.size());
    // Read the ClientHello and hold it to the CONNECT's host.
    const int64_t deadline = NowMs() + kSniWaitMs;
    std::string sni;
    SniResult r;
    while ((r = ParseSni(first, &sni)) == SniResult::kNeedMore && first.size() < 20000) {
      pollfd p{client.fd(), POLLIN, 0};
      int left = static_cast<int>(deadline - NowMs());
      if (left <= 0 || poll(&p, 1, left) <= 0) break;
      char tmp[16384];
      ssize_t n = recv(client.fd(), tmp, sizeof tmp, 0);
      if (n <= 0) break;
      first.append(tmp, static_cast<size_t>(n));
    }
    if (r == SniResult::kFound) {
      std::string want = NormalizeName(HostOnly(host)), got = NormalizeName(sni);
      std::string why;
      if (got != want && !proxy->Allowed(c, sni, port, &why)) {
        spdlog::info("egress proxy: {} CONNECT {}:{} with TLS server name {}: refused", c->sandbox,
                     host, port, sni);
        return;  // the tunnel is open already: all we can do is close it
      }
    }
    FdStream upstream(up->get(), kIdleMs);
    if (!first.empty() && !upstream.WriteAll(first.data(), first.size())) return;
    Splice(upstream);
    proxy->Count(c, upstream.bytes_in(), 0);
  }

  // Copies both ways until both sides are done or either stays silent too long.
  void Splice(FdStream& upstream) {
    int fds[2] = {client.fd(), upstream.fd()};
    bool open[2] = {true, true};
    char tmp[65536];
    while (open[0] || open[1]) {
      // A finished side is left out (fd -1): poll would report its hang-up for ever.
      pollfd p[2] = {{open[0] ? fds[0] : -1, POLLIN, 0}, {open[1] ? fds[1] : -1, POLLIN, 0}};
      int r = poll(p, 2, kIdleMs);
      if (r == 0) return;
      if (r < 0) {
        if (errno == EINTR) continue;
        return;
      }
      for (int i = 0; i < 2; ++i) {
        if (!open[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = recv(fds[i], tmp, sizeof tmp, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        FdStream& out = i == 0 ? upstream : client;
        if (n <= 0) {
          open[i] = false;
          shutdown(fds[1 - i], SHUT_WR);
          if (n < 0) return;
          continue;
        }
        if (i == 1) proxy->Count(c, static_cast<uint64_t>(n), 0);
        if (!out.WriteAll(tmp, static_cast<size_t>(n))) return;
      }
    }
  }

  // Sends a stored response; a client whose own validators match gets a 304. `growing`: the
  // body is still arriving (another client's fetch, followed): sent as it lands in the file.
  bool SendCached(const CacheEntry& e, const http::request_header<>& rq, bool keep_alive,
                  Flight* growing = nullptr) {
    auto header = [&](const char* name) {
      auto it = e.headers.find(name);
      return it == e.headers.end() ? std::string() : it->second;
    };
    const std::string etag = header("ETag"), lm = header("Last-Modified");
    const bool not_modified = (!etag.empty() && rq[http::field::if_none_match] == etag) ||
                              (!lm.empty() && rq[http::field::if_none_match].empty() &&
                               rq[http::field::if_modified_since] == lm);
    http::response<http::empty_body> r{not_modified ? http::status::not_modified : http::status::ok,
                                       11};
    for (const auto& [k, v] : e.headers) r.set(k, v);
    r.set("X-Cache", "HIT from warren");
    if (c->peer) r.set("X-Warren-Validated", std::to_string(e.validated_ms));
    r.keep_alive(keep_alive);
    const bool body = !not_modified && rq.method() != http::verb::head;
    if (!not_modified) r.content_length(e.size);
    http::response_serializer<http::empty_body> sr{r};
    error_code ec;
    http::write_header(*cl, sr, ec);
    if (ec) return false;
    if (!body) return keep_alive;
    auto count = [&](uint64_t n) {
      proxy->Count(c, 0, n);
      proxy->counters(e.registry).cache_bytes += n;
    };
    if (!growing) return cl->SendFile(e.body->get(), 0, e.size, count) && keep_alive;
    for (uint64_t sent = 0; sent < e.size;) {
      bool finished, stored;
      const uint64_t have = growing->WaitForBytes(sent, kIdleMs, &finished, &stored);
      if (have > sent) {
        if (!cl->SendFile(e.body->get(), sent, std::min(have, e.size) - sent, count)) return false;
        sent = std::min(have, e.size);
      } else if (finished || have == sent) {
        return false;  // the fetch failed or stalled: the client sees a short body, not a wrong one
      }
    }
    return keep_alive;
  }

  // Follows another client's fetch of `key`: true when this client was answered (`*keep`:
  // whether its connection stays open), false when nothing was stored and it must fetch.
  bool Follow(Flight& flight, const std::string& key, const http::request_header<>& rq,
              bool keep_alive, bool* keep) {
    CacheEntry meta;
    switch (flight.WaitForAnswer(kIdleMs, &meta)) {
      case Flight::Seen::kStreaming:
        proxy->CountCache(meta.registry, EgressProxy::CacheEvent::kCollapsed);
        *keep = SendCached(meta, rq, keep_alive, &flight);
        return true;
      case Flight::Seen::kFinished:
        if (!flight.stored()) return false;
        if (auto e = proxy->cache_.Lookup(key)) {
          proxy->CountCache(e->registry, EgressProxy::CacheEvent::kCollapsed);
          *keep = SendCached(*e, rq, keep_alive);
          return true;
        }
        return false;
      case Flight::Seen::kTimedOut:
        break;
    }
    return false;
  }

  // Connects `up` to host:port (TLS for an intercepted host), reporting a failure to the
  // client; the connection is this session's target while it is open.
  bool OpenUpstream(const std::string& host, uint16_t port, bool tls, Upstream* up) {
    Policy policy;
    auto fd = Open(host, port, &policy);
    if (!fd.ok()) return false;
    up->fd = std::move(*fd);
    up->policy = policy.Texts();
    if (!tls) {
      up->stream = std::make_unique<FdStream>(up->fd.get(), kIdleMs);
      return true;
    }
    auto s = TlsStream::Connect(up->fd.get(), proxy->client_ctx_.get(), Canonical(host), kIdleMs);
    if (!s.ok()) {
      spdlog::info("egress proxy: {} to {}:{}: {}", c->sandbox, host, port, s.status().ToString());
      DropUpstream(up);
      Error(http::status::bad_gateway, s.status().ToString());
      return false;
    }
    up->stream = std::move(*s);
    return true;
  }
  // Closes `up`, no longer this session's target first (see TargetGuard).
  void DropUpstream(Upstream* up) {
    SetTarget(c->host, c->port, -1);
    up->stream.reset();
    up->fd.Reset();
  }

  // A CONNECT to a host whose package downloads are cached over HTTPS: we verify the real
  // server, then answer the sandbox's TLS with a leaf of the node CA for that host and serve
  // the requests inside like plain-HTTP ones (cached the same way), over one kept upstream.
  void Intercept(const std::string& host, uint16_t port) {
    if (buf.size() != 0)
      return Error(http::status::bad_request,
                   "send the TLS handshake after the proxy's answer to CONNECT");
    Upstream up;
    TargetGuard guard{this};  // after `up`: cleared before its fd closes
    if (!OpenUpstream(host, port, true, &up)) return;
    auto leaf = proxy->ca_->Leaf(Canonical(host));
    if (!leaf.ok()) return Error(http::status::bad_gateway, leaf.status().ToString());
    const char kOk[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (!client.WriteAll(kOk, sizeof kOk - 1)) return;
    std::string sni;
    auto tls = TlsStream::Accept(client.fd(), proxy->server_ctx_.get(), leaf->first.get(),
                                 leaf->second, kSniWaitMs, kIdleMs, &sni);
    if (!tls.ok()) {
      spdlog::info("egress proxy: {} CONNECT {}:{}: {}", c->sandbox, host, port,
                   tls.status().ToString());
      return;
    }
    // The name the client's TLS asked for is the CONNECT's: no fronting another host.
    if (!sni.empty() && NormalizeName(sni) != NormalizeName(HostOnly(host))) {
      spdlog::info("egress proxy: {} CONNECT {}:{} with TLS server name {}: refused", c->sandbox,
                   host, port, sni);
      return;
    }
    proxy->CountIntercepted();
    boost::beast::flat_buffer tbuf{kHeaderLimit * 2};
    cl = tls->get();
    cbuf = &tbuf;
    Cleanup back([&] {
      cl = &client;
      cbuf = &buf;
    });
    for (;;) {
      http::request_parser<http::buffer_body> req;
      req.header_limit(kHeaderLimit);
      req.body_limit(std::numeric_limits<std::uint64_t>::max());
      error_code ec;
      http::read_header(*cl, *cbuf, req, ec);
      if (ec == http::error::header_limit)
        return Error(http::status::request_header_fields_too_large, "request header too large");
      if (ec) return;
      auto& h = req.get();
      if (h.method() == http::verb::connect)
        return Error(http::status::bad_request, "CONNECT inside a tunnel");
      // Origin-form, or absolute-form naming the tunnel's own host.
      Url u{host, port, std::string(h.target())};
      if (u.path.empty() || u.path.front() != '/') {
        Url abs;
        std::string t(h.target());
        if (t.size() > 8 && boost::beast::iequals(t.substr(0, 8), "https://") &&
            ParseHttpUrl("http://" + t.substr(8), &abs) && Canonical(abs.host) == Canonical(host)) {
          u.path = abs.path;
        } else {
          return Error(http::status::bad_request,
                       "a request inside the tunnel to " + host + " must be for that host");
        }
      }
      if (!HostHeaderAgrees(h, host, port)) return;
      if (!Forward(req, u, true, &up)) return;
    }
  }

  // One request to `u` (plain HTTP, or inside an intercepted tunnel when `https`); false:
  // close the client connection. `kept`: the tunnel's upstream, used and kept across
  // requests; otherwise one upstream connection per request.
  bool Forward(http::request_parser<http::buffer_body>& req, const Url& u, bool https,
               Upstream* kept) {
    auto& h = req.get();
    Policy policy;
    if (!Allowed(u.host, u.port, &policy)) return false;  // before the cache too
    const bool client_keep_alive = req.keep_alive();
    const std::string url = (https ? "https://" : "http://") + HostOnly(Canonical(u.host)) + ":" +
                            std::to_string(u.port) + u.path;
    const RequestHints hints = HintsOf(h);
    const CacheClass cls = ClassifyRequest(u.path, hints);
    const CacheKind kind = cls.kind;
    bool cacheable = (h.method() == http::verb::get || h.method() == http::verb::head) &&
                     kind != CacheKind::kNone && req.is_done();
    for (const auto& f : h)
      if (MayCarryCredential(f.name_string())) cacheable = false;
    const std::string key = CacheKey(url, cls, h[http::field::accept]);
    std::optional<CacheEntry> cached = cacheable ? proxy->cache_.Lookup(key) : std::nullopt;
    const bool get = h.method() == http::verb::get;
    std::optional<Leading> leading;
    if (cached && proxy->Current(*cached)) {
      // Metadata near the end of its window is revalidated ahead by the one client that gets
      // to lead its flight; everyone else is served the copy meanwhile, unasked. A busy entry
      // so never expires, and no copy is served past its window.
      bool leader = false;
      if (cacheable && get && proxy->RevalidateAhead(*cached)) {
        std::shared_ptr<Flight> flight = proxy->flights_.Join(key, &leader);
        if (leader) leading.emplace(&proxy->flights_, key, flight);
      }
      if (!leader) {
        proxy->CountCache(cached->registry, EgressProxy::CacheEvent::kHit);
        return SendCached(*cached, h.base(), client_keep_alive);
      }
    } else if (cacheable && get) {
      // A miss, or metadata past its window: one client fetches, the others follow its flight.
      bool leader;
      std::shared_ptr<Flight> flight = proxy->flights_.Join(key, &leader);
      if (leader) {
        leading.emplace(&proxy->flights_, key, flight);
      } else {
        bool keep;
        if (Follow(*flight, key, h.base(), client_keep_alive, &keep)) return keep;
      }
      // A flight that ended just before ours began may have stored it.
      cached = proxy->cache_.Lookup(key);
      if (cached && proxy->Current(*cached)) {
        if (leading) leading->MarkStored();
        proxy->CountCache(cached->registry, EgressProxy::CacheEvent::kHit);
        return SendCached(*cached, h.base(), client_keep_alive);
      }
    }

    // In a cluster, a key another node owns is asked of that node (net/mirror_peers.h); if it
    // cannot answer, of the registry.
    std::optional<MirrorPeer> owner;
    if (cacheable && get && !c->peer)
      if (const MirrorPeers* peers = proxy->peers_.load()) owner = peers->OwnerOf(key);
    const http::request_header<> client_head = h.base();
    const bool chunked_body = req.chunked();
    Upstream fresh, peer;
    std::optional<TargetGuard> guard;  // after `fresh`: cleared before its fd closes
    Upstream* up = nullptr;
    Upstream* reuse = nullptr;  // the tunnel's kept upstream, when this request uses it
    uint64_t in_before = 0;
    boost::beast::flat_buffer ubuf{kHeaderLimit * 2};
    std::optional<http::response_parser<http::buffer_body>> parser;
    error_code ec;
    for (;;) {
      if (owner && !proxy->ConnectPeer(owner->address, &peer)) owner.reset();
      if (owner) {
        up = &peer;
      } else {
        up = reuse = kept;
        if (!up) {
          up = &fresh;
          if (!guard) guard.emplace(this);
        }
        // A kept connection is not reused if the server closed it or sent something unasked,
        // or the sandbox's rules changed since it was opened (its address is checked again).
        if (up->stream && (up->stream->Stale() || up->policy != policy.Texts())) DropUpstream(up);
        if (!up->stream && !OpenUpstream(u.host, u.port, https, up)) return false;
      }
      in_before = up->stream->bytes_in();
      // The request upstream: origin-form (absolute to a peer), no hop-by-hop headers; one
      // request per connection unless the connection is kept.
      std::string host_name = Canonical(u.host);
      if (!u.host.empty() && u.host.front() == '[') host_name = "[" + host_name + "]";
      const std::string authority =
          u.port == (https ? 443 : 80) ? host_name : host_name + ":" + std::to_string(u.port);
      h.target(owner ? (https ? "https://" : "http://") + authority + u.path : u.path);
      h.version(11);
      StripHopByHop(h.base());
      if (chunked_body) h.chunked(true);  // re-framed as it came, or upstream misreads the body
      // The name the cache key has (lowercase, no trailing dot): the same answer for the key.
      h.set(http::field::host, authority);
      if (owner)
        h.set(http::field::proxy_authorization, "Bearer " + proxy->peers_.load()->credential());
      if (!reuse) h.set(http::field::connection, "close");
      if (cached) {
        // Revalidate our copy with its own validators, not the client's.
        h.erase(http::field::if_none_match);
        h.erase(http::field::if_modified_since);
        if (auto it = cached->headers.find("ETag"); it != cached->headers.end())
          h.set(http::field::if_none_match, it->second);
        if (auto it = cached->headers.find("Last-Modified"); it != cached->headers.end())
          h.set(http::field::if_modified_since, it->second);
      } else if (cacheable && get) {
        // We want the whole body to store: the client's conditions are answered by us.
        h.erase(http::field::if_none_match);
        h.erase(http::field::if_modified_since);
        h.erase(http::field::range);
        h.erase(http::field::if_range);
      }
      // One copy serves every client: ask for the unencoded body (stored only if it is that).
      if (cacheable) h.set(http::field::accept_encoding, "identity");
      if (h.method() != http::verb::get && h.method() != http::verb::head)
        h.erase(http::field::expect);
      const bool sent = Relay(req, *cl, *up->stream, nullptr, cbuf);
      // The answer. Beast reads as much as the buffer has room for, at least 512 bytes: room
      // for 64 KiB up front, or a body streams through in pieces of a few hundred bytes.
      ubuf.consume(ubuf.size());
      ubuf.reserve(65536);
      ec = {};
      for (int interim = 0; sent; ++interim) {
        // Interim answers (100 Continue, 103 Early Hints) are not the response: skip them.
        parser.emplace();
        parser->header_limit(kHeaderLimit);
        parser->body_limit(std::numeric_limits<std::uint64_t>::max());
        if (client_head.method() == http::verb::head) parser->skip(true);
        http::read_header(*up->stream, ubuf, *parser, ec);
        const unsigned code = ec ? 0 : parser->get().result_int();
        if (ec || code < 100 || code >= 200 || code == 101 || interim > 8) break;
      }
      // A peer that failed (unreachable, refused us, or could not reach the registry itself):
      // the registry, from here.
      if (owner && (!sent || ec || PeerFailed(parser->get()))) {
        spdlog::info(
            "egress proxy: package mirror peer {} did not answer for {}: {}", owner->name, url,
            !sent || ec ? "connection failed" : std::string(parser->get()["X-Warren-Error"]));
        peer.stream.reset();
        peer.fd.Reset();
        owner.reset();
        continue;
      }
      if (!sent) {
        Error(http::status::bad_gateway, "sending the request to " + u.host + " failed");
        return false;
      }
      break;
    }
    ByteStream& upstream = *up->stream;
    auto& res = *parser;
    if (ec || res.get().result_int() < 200) {
      proxy->Count(c, upstream.bytes_in() - in_before, 0);
      Error(http::status::bad_gateway,
            "no answer from " + u.host + (ec ? ": " + ec.message() : ""));
      return false;
    }
    auto& rh = res.get();
    auto& counters = proxy->counters(cls.registry);
    // Bytes from a peer are the cluster's cache, not the registry's.
    auto count_in = [&](uint64_t n) {
      if (owner) {
        proxy->Count(c, 0, n);
        counters.peer_bytes += n;
      } else {
        proxy->Count(c, n, 0);
        counters.upstream_bytes += n;
      }
    };
    // When upstream last vouched for the answer: now, or when the owning peer last asked.
    int64_t validated_ms = WallMs();
    if (owner) {
      int64_t peer_ms = 0;
      std::string_view v = rh["X-Warren-Validated"];
      if (std::from_chars(v.data(), v.data() + v.size(), peer_ms).ec == std::errc() && peer_ms > 0)
        validated_ms = std::min(validated_ms, peer_ms);
      rh.erase("X-Warren-Validated");
    }
    if (cached && rh.result() == http::status::not_modified) {
      count_in(upstream.bytes_in() - in_before);
      if (reuse && !(res.is_done() && res.keep_alive() && ubuf.size() == 0)) DropUpstream(reuse);
      proxy->cache_.Revalidated(*cached, validated_ms);
      cached->validated_ms = validated_ms;
      if (leading) leading->MarkStored();
      proxy->CountCache(cached->registry, EgressProxy::CacheEvent::kRevalidated);
      return SendCached(*cached, client_head, client_keep_alive);
    }
    if (cacheable)
      proxy->CountCache(cls.registry, owner    ? EgressProxy::CacheEvent::kPeer
                                      : cached ? EgressProxy::CacheEvent::kChanged
                                               : EgressProxy::CacheEvent::kMiss);
    auto cc = std::string(rh[http::field::cache_control]);
    const bool store =
        cacheable && client_head.method() == http::verb::get && rh.result() == http::status::ok &&
        cc.find("no-store") == std::string::npos && cc.find("private") == std::string::npos &&
        OneVariantForAll(rh[http::field::vary], rh[http::field::content_encoding],
                         cls.keyed_by_accept) &&
        IdentityEncoded(rh[http::field::content_encoding]) &&
        (res.content_length() ? *res.content_length() <= proxy->opts_.cache_entry_bytes
                              : res.chunked()) &&  // never a close-delimited body
        (kind == CacheKind::kImmutable || !rh[http::field::etag].empty() ||
         !rh[http::field::last_modified].empty());
    std::unique_ptr<PackageCache::Writer> writer = store ? proxy->cache_.Begin(key) : nullptr;
    CacheEntry meta;
    if (writer) {
      meta.key = key;
      meta.kind = kind;
      meta.registry = cls.registry;
      meta.validated_ms = validated_ms;
      for (auto f :
           {http::field::content_type, http::field::etag, http::field::last_modified,
            http::field::content_encoding, http::field::cache_control, http::field::expires})
        if (auto v = rh[f]; !v.empty())
          meta.headers[std::string(http::to_string(f))] = std::string(v);
      // Followers of this fetch are served from the file as it grows, when its length is known.
      if (leading && res.content_length()) {
        CacheEntry growing = meta;
        growing.size = *res.content_length();
        if (auto reader = writer->OpenReader()) (*leading)->Streaming(growing, std::move(reader));
      }
    }
    // To the client: the same response, re-framed for this connection.
    const bool framed = res.content_length().has_value() || res.chunked() || res.is_done();
    const boost::optional<uint64_t> length = res.content_length();
    const bool http10 = client_head.version() < 11;
    StripHopByHop(rh.base());
    rh.version(11);
    // A body of unknown length: chunked for HTTP/1.1 clients, ended by closing for 1.0 ones.
    if (!length && !res.is_done() && client_head.method() != http::verb::head && !http10)
      rh.chunked(true);
    const bool keep = client_keep_alive && framed && !(http10 && !length);
    rh.keep_alive(keep);
    // A peer stores what it is given with the time upstream vouched for it (see above).
    if (c->peer && writer) rh.set("X-Warren-Validated", std::to_string(meta.validated_ms));
    uint64_t body_bytes = 0;
    const bool upstream_keep = res.keep_alive();
    // A leader whose own client goes away still finishes the fetch its followers wait for.
    bool ok = Relay(
        res, upstream, *cl,
        [&](const char* d, size_t n) {
          body_bytes += n;
          if (writer && (body_bytes > proxy->opts_.cache_entry_bytes || !writer->Append(d, n)))
            writer.reset();
          if (leading) (*leading)->Wrote(writer ? body_bytes : 0);
        },
        &ubuf, /*finish_without_client=*/leading.has_value() && writer != nullptr);
    count_in(upstream.bytes_in() - in_before);
    // Whatever the server sent past this response would be misread as the next one's start.
    if (reuse && !(ok && res.is_done() && upstream_keep && ubuf.size() == 0)) DropUpstream(reuse);
    if (writer && res.is_done() && (!length || *length == body_bytes)) {
      meta.size = body_bytes;
      if (writer->Commit(std::move(meta)) && leading) leading->MarkStored();
    }
    return ok && keep;
  }

  // Streams a message's body from `in` to `out` through `p` (header already read), as in
  // Beast's relay example.
  // `finish_without_client`: when `out` fails, the body is still read to its end (for the
  // tee); false is returned all the same.
  template <bool isRequest, class Tee>
  bool Relay(http::parser<isRequest, http::buffer_body>& p, ByteStream& in, ByteStream& out,
             Tee tee, boost::beast::flat_buffer* in_buf, bool finish_without_client = false) {
    http::serializer<isRequest, http::buffer_body> sr{p.get()};
    char chunk[65536];
    error_code ec;
    bool out_gone = false;
    do {
      if (out_gone) {
        p.get().body().data = chunk;
        p.get().body().size = sizeof chunk;
        http::read(in, *in_buf, p, ec);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) return false;
        if constexpr (!std::is_same_v<Tee, std::nullptr_t>)
          tee(chunk, sizeof chunk - p.get().body().size);
        if (p.is_done()) return false;
        continue;
      }
      if (!p.is_done()) {
        p.get().body().data = chunk;
        p.get().body().size = sizeof chunk;
        http::read(in, *in_buf, p, ec);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) return false;
        p.get().body().size = sizeof chunk - p.get().body().size;
        p.get().body().data = chunk;
        p.get().body().more = !p.is_done();
        if constexpr (!std::is_same_v<Tee, std::nullptr_t>) tee(chunk, p.get().body().size);
      } else {
        p.get().body().data = nullptr;
        p.get().body().size = 0;
        p.get().body().more = false;
      }
      http::write(out, sr, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec && finish_without_client && !p.is_done()) {
        out_gone = true;
        continue;
      }
      if (ec) return false;
    } while (!p.is_done() || !sr.is_done());
    return true;
  }
};

Result<std::unique_ptr<EgressProxy>> EgressProxy::Start(const ProxyOptions& opts, Network* net,
                                                        Resolver* resolver) {
  std::unique_ptr<EgressProxy> p(new EgressProxy(opts, net, resolver));
  WARREN_RETURN_IF_ERROR(p->cache_.Init());
  if (!p->intercept_.empty()) {
    if (opts.ca_dir.empty())
      return Invalid("egress proxy: HTTPS interception needs a CA directory", "");
    p->ca_ = WARREN_TRY(NodeCa::Open(opts.ca_dir, p->intercept_));
    p->server_ctx_ = WARREN_TRY(NewServerTlsContext());
    p->client_ctx_ = WARREN_TRY(NewClientTlsContext(opts.upstream_ca));
  }
  p->listener_ = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!p->listener_) return ErrnoStatus("socket", "egress proxy");
  int one = 1;
  setsockopt(p->listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(opts.port);
  sa.sin_addr.s_addr = opts.addr;
  const std::string where = Ip4String(opts.addr) + ":" + std::to_string(opts.port);
  if (bind(p->listener_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      listen(p->listener_.get(), 512) != 0)
    return ErrnoStatus("listen egress proxy", where);
  p->wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!p->wake_) return ErrnoStatus("eventfd", "egress proxy");
  p->acceptor_ = std::thread([q = p.get()] { q->Accept(q->listener_.get(), false); });
  return p;
}

Status EgressProxy::ServePeers(const std::string& host, uint16_t port, const MirrorPeers* peers) {
  if (peer_listener_)
    return Status(Code::kConflict, "serve package mirror peers", host, "already served");
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) != 1)
    return Invalid("the package mirror's peer listener wants an IPv4 address", host);
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return ErrnoStatus("socket", "package mirror peers");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr = a;
  const std::string where = host + ":" + std::to_string(port);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      listen(fd.get(), 512) != 0)
    return ErrnoStatus("listen for package mirror peers", where);
  socklen_t len = sizeof sa;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return ErrnoStatus("getsockname", where);
  peer_port_ = ntohs(sa.sin_port);
  peer_listener_ = std::move(fd);
  peers_.store(peers);
  peer_acceptor_ = std::thread([this] { Accept(peer_listener_.get(), true); });
  return Status::Ok();
}

bool EgressProxy::ConnectPeer(const std::string& address, Upstream* up) {
  std::string host;
  uint16_t port;
  in_addr a{};
  if (!ParseHostPort(address, 0, &host, &port) || inet_pton(AF_INET, host.c_str(), &a) != 1)
    return false;
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr = a;
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS)
    return false;
  // A peer is on the cluster's network: one that does not answer quickly is down.
  pollfd p{fd.get(), POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, 2000) <= 0 || getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
      err != 0)
    return false;
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  up->fd = std::move(fd);
  up->stream = std::make_unique<FdStream>(up->fd.get(), kIdleMs);
  up->policy.clear();
  return true;
}

EgressProxy::~EgressProxy() {
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof one);
  if (acceptor_.joinable()) acceptor_.join();
  if (peer_acceptor_.joinable()) peer_acceptor_.join();
  std::unique_lock lock(mu_);
  stop_ = true;
  for (Conn* c : conns_) {
    shutdown(c->client.get(), SHUT_RDWR);
    int u = c->upstream.load();
    if (u >= 0) shutdown(u, SHUT_RDWR);
  }
  work_cv_.notify_all();
  cv_.wait(lock, [&] { return conns_.empty() && workers_ == 0; });
}

void EgressProxy::Accept(int listener, bool peers) {
  for (;;) {
    // The wake eventfd is never read: once written it wakes every acceptor for good.
    pollfd p[2] = {{listener, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (p[1].revents) return;
    sockaddr_in from{};
    socklen_t len = sizeof from;
    int fd =
        accept4(listener, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto c = std::make_unique<Conn>();
    c->client = UniqueFd(fd);
    c->src = from.sin_addr.s_addr;
    c->peer = peers;
    {
      std::lock_guard lock(mu_);
      // A peer node stands for many sandboxes: only the node's own bound applies to it.
      if (stop_ || conns_.size() >= opts_.max_connections ||
          (!peers && per_sandbox_[c->src] >= opts_.max_per_sandbox)) {
        ++total_.refused;
        const char k503[] =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        (void)!send(fd, k503, sizeof k503 - 1, MSG_NOSIGNAL);
        continue;
      }
      conns_.insert(c.get());
      if (!peers) ++per_sandbox_[c->src];
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lock(mu_);
    pending_.push_back(c.release());
    // Threads are kept and reused: a fresh one costs 10-25 ms of page faults here (stack,
    // malloc arena) before it serves a byte.
    if (idle_workers_ == 0) {
      try {
        std::thread([this] { Work(); }).detach();
        ++workers_;
      } catch (const std::system_error& e) {  // out of threads: a busy one takes it later
        spdlog::warn("egress proxy: cannot start a worker thread: {}", e.what());
      }
    }
    work_cv_.notify_one();
  }
}

void EgressProxy::Work() {
  // OpenSSL writes to sockets with write(2): a peer gone must be EPIPE here, not a SIGPIPE
  // that ends the daemon (`warren serve` ignores it too; this holds for any embedder).
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_workers_;
    const bool got = work_cv_.wait_for(lock, std::chrono::seconds(60),
                                       [&] { return stop_ || !pending_.empty(); });
    --idle_workers_;
    if (pending_.empty() && (stop_ || !got)) break;  // stopping, or idle for a minute
    Conn* c = pending_.front();
    pending_.pop_front();
    lock.unlock();
    if (!stop_) Serve(c);
    lock.lock();
    conns_.erase(c);
    if (!c->peer && --per_sandbox_[c->src] == 0) per_sandbox_.erase(c->src);
    delete c;
  }
  --workers_;
  cv_.notify_all();
}

void EgressProxy::Serve(Conn* c) {
  std::string id;
  if (c->peer) {
    ProxySession s{this, c, FdStream(c->client.get(), kIdleMs)};
    try {
      s.Run();
    } catch (const std::exception& e) {
      spdlog::warn("egress proxy: a package mirror peer: {}", e.what());
    }
    return;
  }
  if (!net_->PolicyOf(c->src, nullptr, &id)) {
    const char k403[] = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    (void)!send(c->client.get(), k403, sizeof k403 - 1, MSG_NOSIGNAL);
    return;
  }
  c->sandbox = id;
  {
    std::lock_guard lock(mu_);
    ++by_sandbox_[id].connections;
    ++total_.connections;
  }
  ProxySession s{this, c, FdStream(c->client.get(), kIdleMs)};
  try {
    s.Run();
  } catch (const std::exception& e) {
    spdlog::warn("egress proxy: {}: {}", id, e.what());
  }
}

bool EgressProxy::Allowed(Conn* c, const std::string& host, uint16_t port, std::string* why,
                          Policy* policy) {
  Policy local;
  Policy& p = policy ? *policy : local;
  if (!net_->PolicyOf(c->src, &p) || !p.egress) {
    *why = "this sandbox's network mode is none";
  } else if (p.AllowsHost(host, port, Proto::kTcp)) {
    return true;
  } else {
    *why = HostOnly(host) + ":" + std::to_string(port) +
           " is not allowed by this sandbox's network policy";
  }
  std::lock_guard lock(mu_);
  ++by_sandbox_[c->sandbox].refused;
  ++total_.refused;
  return false;
}

namespace {

int64_t FreshFor(const FreshnessWindows& windows, const CacheEntry& e) {
  auto cc = e.headers.find("Cache-Control");
  return FreshForMs(windows, e.registry, cc == e.headers.end() ? "" : cc->second);
}

}  // namespace

bool EgressProxy::Current(const CacheEntry& e) const {
  if (e.kind == CacheKind::kImmutable) return true;
  const int64_t age = WallMs() - e.validated_ms;
  return age >= 0 && age < FreshFor(opts_.fresh, e);  // a clock set back counts as stale
}

bool EgressProxy::RevalidateAhead(const CacheEntry& e) const {
  if (e.kind == CacheKind::kImmutable) return false;
  const int64_t age = WallMs() - e.validated_ms, fresh = FreshFor(opts_.fresh, e);
  return age >= fresh - fresh / 4;
}

void EgressProxy::CountCache(Registry r, CacheEvent e) {
  RegistryCounters& n = counters(r);
  switch (e) {
    case CacheEvent::kHit:
      ++n.hit;
      break;
    case CacheEvent::kRevalidated:
      ++n.revalidated;
      break;
    case CacheEvent::kMiss:
      ++n.miss;
      break;
    case CacheEvent::kChanged:
      ++n.changed;
      break;
    case CacheEvent::kCollapsed:
      ++n.collapsed;
      break;
    case CacheEvent::kPeer:
      ++n.peer;
      break;
  }
}

bool EgressProxy::Intercepts(const std::string& host, uint16_t port) const {
  if (!ca_ || port != 443) return false;
  int family;
  std::array<uint8_t, 16> lit;
  const std::string h = Canonical(host);
  return !ParseAddress(h, &family, &lit) && intercept_.Matches(h);
}

void EgressProxy::CountIntercepted() {
  std::lock_guard lock(mu_);
  ++total_intercepted_;
}

void EgressProxy::Count(Conn* c, uint64_t upstream, uint64_t cached) {
  std::lock_guard lock(mu_);
  if (!c->peer) {
    auto& b = by_sandbox_[c->sandbox];
    b.upstream += upstream;
    b.cache += cached;
  }
  total_.upstream += upstream;
  total_.cache += cached;
}

void EgressProxy::Recheck(uint32_t src) {
  Policy p;
  const bool known = net_->PolicyOf(src, &p);
  std::lock_guard lock(mu_);
  for (Conn* c : conns_) {
    if (c->src != src) continue;
    std::lock_guard cl(c->mu);
    const bool keep =
        known && p.egress && (c->host.empty() || p.AllowsHost(c->host, c->port, Proto::kTcp));
    if (keep) continue;
    shutdown(c->client.get(), SHUT_RDWR);
    if (int u = c->upstream.load(); u >= 0) shutdown(u, SHUT_RDWR);
  }
}

void EgressProxy::Forget(const std::string& id) {
  std::lock_guard lock(mu_);
  by_sandbox_.erase(id);
}

nlohmann::json EgressProxy::Stats() {
  nlohmann::json registries = nlohmann::json::object();
  for (Registry r : kAllRegistries) {
    RegistryCounters& n = counters(r);
    registries[std::string(RegistryName(r))] = {{"hit", n.hit.load()},
                                                {"revalidated", n.revalidated.load()},
                                                {"miss", n.miss.load()},
                                                {"changed", n.changed.load()},
                                                {"collapsed", n.collapsed.load()},
                                                {"peer", n.peer.load()},
                                                {"upstream_bytes", n.upstream_bytes.load()},
                                                {"cache_bytes", n.cache_bytes.load()},
                                                {"peer_bytes", n.peer_bytes.load()}};
  }
  std::lock_guard lock(mu_);
  nlohmann::json per = nlohmann::json::object();
  for (auto& [id, b] : by_sandbox_)
    per[id] = {{"upstream_bytes", b.upstream},
               {"cache_bytes", b.cache},
               {"connections", b.connections},
               {"refused", b.refused}};
  return {{"upstream_bytes", total_.upstream},
          {"cache_bytes", total_.cache},
          {"connections", total_.connections},
          {"refused", total_.refused},
          {"intercepted_connections", total_intercepted_},
          {"intercept_hosts", intercept_.hosts()},
          {"open_connections", conns_.size()},
          {"cache_entries", cache_.entries()},
          {"registries", registries},
          {"fetches_in_flight", flights_.in_flight()},
          {"cache_size_bytes", cache_.bytes()},
          {"sandboxes", per}};
}

}  // namespace warren::net
