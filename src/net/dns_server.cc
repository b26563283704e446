#include "net/dns_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/dns_message.h"
#include "net/firewall.h"
#include "net/network.h"
#include "net/resolver.h"

namespace warren::net {

constexpr size_t kWorkers = 4;
constexpr size_t kMaxQueued = 4096;
constexpr uint32_t kAllowSlackS = 30;  // clients use an answer a little past its TTL

Result<std::unique_ptr<DnsServer>> DnsServer::Start(uint32_t addr, uint16_t port, Network* net,
                                                    Resolver* resolver) {
  std::unique_ptr<DnsServer> d(new DnsServer(net, resolver));
  d->sock_ = UniqueFd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!d->sock_) return ErrnoStatus("socket", "dns");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = addr;
  const std::string where = Ip4String(addr) + ":" + std::to_string(port);
  if (bind(d->sock_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return ErrnoStatus("bind dns", where);
  d->wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!d->wake_) return ErrnoStatus("eventfd", "dns");
  d->receiver_ = std::thread([p = d.get()] { p->Receive(); });
  for (size_t i = 0; i < kWorkers; ++i) d->workers_.emplace_back([p = d.get()] { p->Work(); });
  return d;
}

DnsServer::~DnsServer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof one);
  cv_.notify_all();
  if (receiver_.joinable()) receiver_.join();
  for (auto& t : workers_) t.join();
}

nlohmann::json DnsServer::Stats() const {
  return {{"answered", answered_.load()}, {"refused", refused_.load()}, {"failed", failed_.load()}};
}

void DnsServer::Receive() {
  char buf[4096];
  for (;;) {
    pollfd p[2] = {{sock_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (p[1].revents) return;
    for (;;) {
      Query q;
      socklen_t len = sizeof q.from;
      ssize_t n =
          recvfrom(sock_.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&q.from), &len);
      if (n < 0) break;
      q.msg.assign(buf, static_cast<size_t>(n));
      std::lock_guard lock(mu_);
      if (queue_.size() >= kMaxQueued) {
        ++failed_;  // overloaded: the client retries
        continue;
      }
      queue_.push_back(std::move(q));
      cv_.notify_one();
    }
  }
}

void DnsServer::Work() {
  for (;;) {
    Query q;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      q = std::move(queue_.front());
      queue_.pop_front();
    }
    std::string reply = Answer(q.from.sin_addr.s_addr, q.msg);
    if (!reply.empty())
      (void)sendto(sock_.get(), reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&q.from),
                   sizeof q.from);
  }
}

std::string DnsServer::Answer(uint32_t src, const std::string& msg) {
  Policy policy;
  if (!net_->PolicyOf(src, &policy) || !policy.egress) {
    ++refused_;
    return BuildDnsError(msg, kRcodeRefused);
  }
  auto q = ParseDnsQuery(msg);
  if (!q) {
    ++failed_;
    return BuildDnsError(msg, kRcodeFormErr);
  }
  if (q->qclass != 1) return BuildDnsResponse(msg, *q, kRcodeNotImp);
  const std::string name = NormalizeName(q->name);
  if (name.empty() || policy.RulesForName(name).empty()) {
    ++refused_;
    spdlog::debug("dns: {} asked for {}: not allowed", Ip4String(src), q->name);
    return BuildDnsResponse(msg, *q, kRcodeNxDomain);
  }
  // Allowed names exist. Questions other than A and AAAA get an empty answer, and so does
  // AAAA where sandboxes have no IPv6 (their IPv6 then goes through the proxy): their
  // clients connect over IPv4.
  const bool v6 = q->qtype == kDnsTypeAAAA && net_->ipv6();
  if (q->qtype != kDnsTypeA && !v6) {
    ++answered_;
    return BuildDnsResponse(msg, *q, kRcodeOk);
  }
  auto r = resolver_->Resolve(name);
  if (!r.ok()) {
    ++failed_;
    return BuildDnsResponse(msg, *q,
                            r.status().code() == Code::kNotFound ? kRcodeNxDomain : kRcodeServFail);
  }
  // Allowed before the client hears of them: its connect right after must pass. Only what
  // was allowed is answered.
  Resolution allowed = net_->AllowResolved(src, name, *r, kAllowSlackS, v6 ? AF_INET6 : AF_INET);
  ++answered_;
  return BuildDnsResponse(msg, *q, kRcodeOk, allowed.addrs, r->ttl_s, allowed.addrs6);
}

}  // namespace warren::net
