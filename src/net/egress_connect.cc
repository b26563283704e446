// How the egress proxy reaches upstream: the addresses it never connects to whatever a name
// resolves to (the node itself, loopback, link-local, multicast, sandboxes), and the connect
// itself, IPv4 addresses first, then IPv6.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "net/egress_proxy.h"
#include "net/remote_end.h"
#include "net/resolver.h"

namespace warren::net {
namespace {

constexpr int kConnectMs = 10000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool InNet(uint32_t addr, uint32_t net, int prefix) {  // both network byte order
  return PrefixMatches(reinterpret_cast<const uint8_t*>(&addr),
                       reinterpret_cast<const uint8_t*>(&net), prefix);
}

}  // namespace

void EgressProxy::RefreshLocalAddresses() {
  if (NowMs() - local_addrs_at_ <= 10000) return;
  local_addrs_.clear();
  local_addrs6_.clear();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      if (i->ifa_addr->sa_family == AF_INET) {
        local_addrs_.insert(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        Ip6 a;
        memcpy(a.data(), &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16);
        local_addrs6_.insert(a);
      }
    }
    freeifaddrs(list);
  }
  local_addrs_at_ = NowMs();
}

bool EgressProxy::Forbidden(uint32_t a) {
  // This, loopback, link-local (cloud metadata) and multicast; the node's sandboxes.
  static constexpr std::pair<uint32_t, int> kNever[] = {
      {0x00000000, 8}, {0x7f000000, 8}, {0xa9fe0000, 16}, {0xe0000000, 3}};
  for (const auto& [net, prefix] : kNever)
    if (InNet(a, htonl(net), prefix)) return true;
  if (InNet(a, opts_.subnet, opts_.prefix)) return true;
  std::lock_guard lock(mu_);
  RefreshLocalAddresses();
  return local_addrs_.count(a) > 0;
}

bool EgressProxy::Forbidden6(const Ip6& a) {
  if (IsNeverReachable6(a)) return true;
  // Sandboxes, of this node and of any other.
  if (PrefixMatches(a.data(), kSandboxPrefix6.data(), 96)) return true;
  // NAT64 and 6to4 gateways translate to the IPv4 address inside.
  if (auto v4 = EmbeddedIpv4(a); v4 && Forbidden(*v4)) return true;
  std::lock_guard lock(mu_);
  RefreshLocalAddresses();
  return local_addrs6_.count(a) > 0;
}

Result<UniqueFd> EgressProxy::Connect(const std::string& host, uint16_t port,
                                      const Policy& policy) {
  // IPv4 first, then IPv6: the order sandboxes had before the proxy spoke IPv6, and a name
  // whose only addresses are IPv6 is still reached.
  std::vector<RemoteEnd> dests;
  bool trusted = true;  // an address the sandbox named itself was checked against its rules
  int family;
  Ip6 lit;
  if (ParseAddress(host, &family, &lit)) {
    dests.push_back(RemoteEnd{family, lit, port});  // an IPv4 literal in the first 4 bytes
  } else {
    std::string name = NormalizeName(host);
    if (name.empty()) return Invalid("not a host name", host);
    Resolution r = WARREN_TRY(resolver_->Resolve(name));
    for (uint32_t a : r.addrs) dests.push_back(RemoteEnd::V4(a, port, Proto::kTcp));
    for (const Ip6& a : r.addrs6) dests.push_back(RemoteEnd{AF_INET6, a, port});
    trusted = r.trusted;
  }
  const std::string what = host + ":" + std::to_string(port);
  Status last = Status(Code::kUnavailable, "connect", what, "no usable address");
  for (const RemoteEnd& d : dests) {
    const std::string shown = d.AddressString();
    const bool v4 = d.family == AF_INET;
    if (v4 ? Forbidden(d.v4()) : Forbidden6(d.addr)) {
      last = Status(Code::kForbidden, "connect", what,
                    shown +
                        " is on the node itself, loopback, link-local, multicast or the sandbox "
                        "network");
      continue;
    }
    const bool internal = v4 ? IsInternalAddress(d.v4()) : IsInternalAddress6(d.addr);
    if (!trusted && internal && !policy.AllowsAddress(d.family, d.addr.data(), port, Proto::kTcp)) {
      last = Status(Code::kForbidden, "connect", what,
                    shown + " is an internal address; only an address rule can open it");
      continue;
    }
    UniqueFd fd(socket(d.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return ErrnoStatus("socket", what);
    sockaddr_storage ss;
    const socklen_t len = d.Fill(&ss);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) {
      last = ErrnoStatus("connect", what + " (" + shown + ")");
      continue;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    if (poll(&p, 1, kConnectMs) <= 0) {
      last = Status(Code::kUnavailable, "connect", what + " (" + shown + ")", "timed out");
      continue;
    }
    int err = 0;
    socklen_t errlen = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &errlen);
    if (err != 0) {
      last = ErrnoStatus("connect", what + " (" + shown + ")", err);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  return last;
}

}  // namespace warren::net
