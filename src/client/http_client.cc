#include "client/http_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "base/thread_annotations.h"

namespace warren::client {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

}  // namespace

struct HttpClient::Impl {
  std::string host, port, token;
  std::string bad_url;  // why the URL cannot be used, if it cannot
  bool tls =
      false;  // https://: verified against the system's roots (or SSL_CERT_FILE / SSL_CERT_DIR)
  net::io_context ioc;
  std::unique_ptr<net::ssl::context> ssl_ctx;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buf;
  int dead_peer_s = 0;
  // The connected socket, for Abort() from another thread; guarded so that Abort never shuts
  // down an fd number the socket no longer owns.
  Mutex fd_mu;
  int fd GUARDED_BY(fd_mu) = -1;
  bool aborted GUARDED_BY(fd_mu) = false;

  tcp::socket& Socket() {
    return tls ? beast::get_lowest_layer(*secure).socket() : plain->socket();
  }
  // After connecting: detection of a dead peer, and the fd for Abort (which may have come
  // while connecting).
  Status Connected() EXCLUDES(fd_mu) {
    if (dead_peer_s > 0) {
      const int fd_now = Socket().native_handle();
      const int on = 1, idle = std::max(1, dead_peer_s / 3), intvl = std::max(1, dead_peer_s / 6),
                cnt = 3;
      const unsigned user_ms = static_cast<unsigned>(dead_peer_s) * 1000;
      (void)setsockopt(fd_now, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
      (void)setsockopt(fd_now, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
      (void)setsockopt(fd_now, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
      (void)setsockopt(fd_now, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
      (void)setsockopt(fd_now, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms);
    }
    {
      MutexLock lock(&fd_mu);
      if (!aborted) {
        fd = Socket().native_handle();
        return Status::Ok();
      }
    }
    Drop();  // takes fd_mu itself, so never under the lock above
    return Status(Code::kUnavailable, "connect to", host + ":" + port, "aborted");
  }

  // Calls f with whichever stream is connected.
  template <typename F>
  auto With(F&& f) {
    return tls ? f(*secure) : f(*plain);
  }
  void Drop() EXCLUDES(fd_mu) {
    {
      MutexLock lock(&fd_mu);
      fd = -1;
      aborted = false;
    }
    plain.reset();
    secure.reset();
    // Bytes of the dropped connection (a reply cut short) must not start the next one's.
    buf.clear();
  }

  Status Connect() {
    if (plain || secure) return Status::Ok();
    if (!bad_url.empty()) return Status(Code::kInvalid, "connect to warren", "WARREN_URL", bad_url);
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    auto results = resolver.resolve(host, port, ec);
    if (ec) return Status(Code::kUnavailable, "resolve", host, ec.message());
    auto unreachable = [&](const std::string& why) {
      Drop();
      return Status(Code::kUnavailable, "connect to warren at", host + ":" + port, why);
    };
    if (!tls) {
      plain = std::make_unique<beast::tcp_stream>(ioc);
      plain->connect(results, ec);
      if (ec) return unreachable(ec.message() + " (is `warren serve` running?)");
      return Connected();
    }
    if (!ssl_ctx) {
      ssl_ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
      ssl_ctx->set_default_verify_paths(ec);
      if (ec) return Status(Code::kInternal, "load trusted certificates", "", ec.message());
      ssl_ctx->set_verify_mode(net::ssl::verify_peer);
    }
    secure = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc, *ssl_ctx);
    SSL* ssl = secure->native_handle();
    // The certificate must name the host we asked for: its IP address, or its DNS name (also
    // sent as SNI).
    boost::system::error_code ip_ec;
    net::ip::make_address(host, ip_ec);
    if (!ip_ec) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
    } else if (SSL_set1_host(ssl, host.c_str()) != 1 ||
               SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
      return unreachable("cannot use `" + host + "` as a TLS host name");
    }
    beast::get_lowest_layer(*secure).connect(results, ec);
    if (ec) return unreachable(ec.message() + " (is `warren serve` running?)");
    secure->handshake(net::ssl::stream_base::client, ec);
    if (ec) {
      std::string why = "TLS handshake: " + ec.message();
      const long v = SSL_get_verify_result(ssl);
      if (v != X509_V_OK) why += std::string(" (") + X509_verify_cert_error_string(v) + ")";
      return unreachable(why);
    }
    return Connected();
  }

  template <typename Req>
  void Prepare(Req& req) {
    req.set(http::field::host, host);
    req.set(http::field::user_agent, "warren-cli");
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    req.keep_alive(true);
  }

  template <typename Req>
  Result<Response> RoundTrip(Req& req, bool retry) {
    WARREN_RETURN_IF_ERROR(Connect());
    beast::error_code ec;
    http::response_parser<http::string_body> p;
    p.body_limit(1ull << 32);
    With([&](auto& s) {
      http::write(s, req, ec);
      if (!ec) http::read(s, buf, p, ec);
      return 0;
    });
    if (ec) {
      Drop();
      buf.clear();
      // A kept-alive connection the server closed meanwhile: one fresh attempt.
      if (retry) return RoundTrip(req, false);
      return Status(Code::kUnavailable, "request", std::string(req.target()), ec.message());
    }
    auto& res = p.get();
    if (!res.keep_alive()) Drop();
    return Response{static_cast<int>(res.result_int()), std::string(res[http::field::content_type]),
                    std::move(res.body())};
  }
};

HttpClient::HttpClient(std::string url, std::string token) : impl_(std::make_unique<Impl>()) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.rfind("https://", 0) == 0) {
    rest = rest.substr(8);
    impl_->tls = true;
  } else if (rest.find("://") != std::string::npos) {
    impl_->bad_url = "`" + url + "`: only http:// and https:// are supported";
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.back() == ']') {
    impl_->host = rest;
    impl_->port = impl_->tls ? "443" : "80";
  } else {
    impl_->host = rest.substr(0, colon);
    impl_->port = rest.substr(colon + 1);
  }
  if (impl_->host.size() > 2 && impl_->host.front() == '[')
    impl_->host = impl_->host.substr(1, impl_->host.size() - 2);
  impl_->token = std::move(token);
}

HttpClient::~HttpClient() = default;

Result<Response> HttpClient::Request(const std::string& method, const std::string& target,
                                     const std::string& body, const std::string& content_type) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  impl_->Prepare(req);
  if (!body.empty() || method == "POST" || method == "PUT") {
    req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
  }
  return impl_->RoundTrip(req, true);
}

Result<Response> HttpClient::UploadFile(const std::string& method, const std::string& target,
                                        const std::string& path, const std::string& content_type) {
  http::request<http::file_body> req{http::string_to_verb(method), target, 11};
  impl_->Prepare(req);
  beast::error_code ec;
  req.body().open(path.c_str(), beast::file_mode::scan, ec);
  if (ec) return Status(Code::kInvalid, "open", path, ec.message());
  req.set(http::field::content_type, content_type);
  req.prepare_payload();
  return impl_->RoundTrip(req, false);
}

Status HttpClient::StreamLines(const std::string& target,
                               const std::function<void(std::string_view)>& on_line) {
  WARREN_RETURN_IF_ERROR(impl_->Connect());
  http::request<http::empty_body> req{http::verb::get, target, 11};
  impl_->Prepare(req);
  beast::error_code ec;
  http::response_parser<http::buffer_body> p;
  p.body_limit(boost::none);
  impl_->With([&](auto& s) {
    http::write(s, req, ec);
    if (!ec) http::read_header(s, impl_->buf, p, ec);
    return 0;
  });
  if (ec) {
    impl_->Drop();
    return Status(Code::kUnavailable, "stream", target, ec.message());
  }
  int status = static_cast<int>(p.get().result_int());
  std::string pending, whole;
  char tmp[65536];
  while (!p.is_done()) {
    // read_some, not read: read waits until the buffer is full, holding back a live
    // command's lines until 64 KiB of them came.
    p.get().body().data = tmp;
    p.get().body().size = sizeof tmp;
    impl_->With([&](auto& s) {
      http::read_some(s, impl_->buf, p, ec);
      return 0;
    });
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      impl_->Drop();
      return Status(Code::kUnavailable, "stream", target, ec.message());
    }
    size_t n = sizeof tmp - p.get().body().size;
    if (status / 100 != 2) {
      whole.append(tmp, n);
      continue;
    }
    pending.append(tmp, n);
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      on_line(std::string_view(pending).substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
  }
  if (!p.get().keep_alive()) impl_->Drop();
  if (status / 100 != 2) return ToStatus(Response{status, "", whole}, "stream");
  if (!pending.empty()) on_line(pending);
  return Status::Ok();
}

Status ToStatus(const Response& r, const std::string& what) {
  if (r.status / 100 == 2) return Status::Ok();
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object())
    return Status(CodeFromName(j["error"].value("code", "internal")), what, "",
                  j["error"].value("message", ""));
  return Status(Code::kInternal, what, "",
                "HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
}

Result<nlohmann::json> JsonOf(const Response& r, const std::string& what) {
  WARREN_RETURN_IF_ERROR(ToStatus(r, what));
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return Internal(what, "", "the server sent malformed JSON");
  return j;
}

void HttpClient::DetectDeadPeer(int seconds) { impl_->dead_peer_s = seconds; }

void HttpClient::Abort() {
  MutexLock lock(&impl_->fd_mu);
  if (impl_->fd >= 0)
    (void)::shutdown(impl_->fd, SHUT_RDWR);
  else
    impl_->aborted = true;  // connecting now: Connected() gives up
}

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace warren::client
