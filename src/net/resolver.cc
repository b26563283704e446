#include "net/resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "net/policy.h"

namespace warren::net {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint32_t kHostsTtl = 300;
constexpr uint32_t kMinTtl = 5, kMaxTtl = 3600;

struct Answer {
  bool done = false;
  int status = ARES_SUCCESS;
  Resolution r;
};

void OnAddrinfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
  auto* a = static_cast<Answer*>(arg);
  a->done = true;
  a->status = status;
  if (status != ARES_SUCCESS || !res) return;
  uint32_t ttl = kMaxTtl;
  for (ares_addrinfo_node* n = res->nodes; n; n = n->ai_next) {
    if (n->ai_family == AF_INET) {
      a->r.addrs.push_back(reinterpret_cast<sockaddr_in*>(n->ai_addr)->sin_addr.s_addr);
    } else if (n->ai_family == AF_INET6) {
      Ip6 v6;
      memcpy(v6.data(), &reinterpret_cast<sockaddr_in6*>(n->ai_addr)->sin6_addr, 16);
      a->r.addrs6.push_back(v6);
    } else {
      continue;
    }
    ttl = std::min<uint32_t>(ttl, static_cast<uint32_t>(std::max(0, n->ai_ttl)));
  }
  a->r.ttl_s = std::clamp(ttl, kMinTtl, kMaxTtl);
  ares_freeaddrinfo(res);
}

}  // namespace

Result<std::unique_ptr<Resolver>> Resolver::Create(const std::string& hosts_file,
                                                   const std::string& upstream) {
  static const int init = ares_library_init(ARES_LIB_INIT_ALL);
  if (init != ARES_SUCCESS) return Internal("init c-ares", "", ares_strerror(init));
  std::unique_ptr<Resolver> r(new Resolver());
  r->upstream_ = upstream;
  if (!hosts_file.empty()) {
    std::ifstream in(hosts_file);
    if (!in) return ErrnoStatus("open", hosts_file);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      std::istringstream words(line);
      std::string ip, name;
      if (!(words >> ip)) continue;
      in_addr a{};
      Ip6 a6{};
      const bool v4 = inet_pton(AF_INET, ip.c_str(), &a) == 1;
      if (!v4 && inet_pton(AF_INET6, ip.c_str(), a6.data()) != 1)
        return Invalid("bad address `" + ip + "` at line " + std::to_string(lineno), hosts_file);
      while (words >> name) {
        std::string n = NormalizeName(name);
        if (n.empty())
          return Invalid("bad name `" + name + "` at line " + std::to_string(lineno), hosts_file);
        Resolution& entry = r->hosts_[n];
        entry.ttl_s = kHostsTtl;
        entry.trusted = true;
        if (v4)
          entry.addrs.push_back(a.s_addr);
        else
          entry.addrs6.push_back(a6);
      }
    }
  }
  return r;
}

Resolver::~Resolver() = default;

Result<Resolution> Resolver::Resolve(const std::string& name) {
  if (auto it = hosts_.find(name); it != hosts_.end()) return it->second;
  const int64_t now = NowMs();
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(name);
    if (it != cache_.end() && it->second.expiry_ms > now) {
      Resolution r = it->second.r;
      r.ttl_s = static_cast<uint32_t>(std::max<int64_t>(1, (it->second.expiry_ms - now) / 1000));
      return r;
    }
  }
  Resolution r = WARREN_TRY(Upstream(name));
  std::lock_guard lock(mu_);
  if (cache_.size() > 10000) cache_.clear();  // bounded; refilled on demand
  cache_[name] = Cached{r, now + int64_t{r.ttl_s} * 1000};
  return r;
}

Result<Resolution> Resolver::Upstream(const std::string& name) {
  ares_channel ch;
  ares_options opts{};
  opts.timeout = 2000;
  opts.tries = 2;
  char lookups[] = "b";  // DNS only: never the host's /etc/hosts
  opts.lookups = lookups;
  int rc = ares_init_options(&ch, &opts, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS);
  if (rc != ARES_SUCCESS) return Internal("init resolver", name, ares_strerror(rc));
  if (!upstream_.empty() &&
      (rc = ares_set_servers_ports_csv(ch, upstream_.c_str())) != ARES_SUCCESS) {
    ares_destroy(ch);
    return Invalid(std::string("bad DNS upstream: ") + ares_strerror(rc), upstream_);
  }
  Answer a;
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;  // A and AAAA, asked at once
  ares_getaddrinfo(ch, name.c_str(), nullptr, &hints, OnAddrinfo, &a);
  // poll, not select: the daemon's fds run far past FD_SETSIZE with many sandboxes.
  while (!a.done) {
    ares_socket_t socks[ARES_GETSOCK_MAXNUM];
    int bits = ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
    pollfd pfds[ARES_GETSOCK_MAXNUM];
    nfds_t n = 0;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      short ev = static_cast<short>((ARES_GETSOCK_READABLE(bits, i) ? POLLIN : 0) |
                                    (ARES_GETSOCK_WRITABLE(bits, i) ? POLLOUT : 0));
      if (ev) pfds[n++] = pollfd{socks[i], ev, 0};
    }
    if (n == 0) break;
    timeval tvbuf, *tv = ares_timeout(ch, nullptr, &tvbuf);
    int ms = tv ? static_cast<int>(tv->tv_sec * 1000 + tv->tv_usec / 1000) + 1 : 1000;
    int ready = poll(pfds, n, ms);
    if (ready <= 0) {
      ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
      continue;
    }
    for (nfds_t i = 0; i < n; ++i)
      ares_process_fd(ch,
                      pfds[i].revents & (POLLIN | POLLERR | POLLHUP) ? pfds[i].fd : ARES_SOCKET_BAD,
                      pfds[i].revents & POLLOUT ? pfds[i].fd : ARES_SOCKET_BAD);
  }
  ares_destroy(ch);  // completes a pending query with ARES_EDESTRUCTION
  if (a.status == ARES_ENOTFOUND || a.status == ARES_ENODATA || a.status == ARES_ENONAME ||
      (a.status == ARES_SUCCESS && a.r.addrs.empty() && a.r.addrs6.empty()))
    return NotFound("name", name);
  if (a.status != ARES_SUCCESS)
    return Status(Code::kUnavailable, "resolve", name,
                  std::string("upstream DNS: ") + ares_strerror(a.status));
  return a.r;
}

}  // namespace warren::net
