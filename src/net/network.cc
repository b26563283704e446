#include "net/network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/mount.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "base/sha256.h"
#include "net/address_ranges.h"
#include "net/conntrack.h"
#include "net/dns_server.h"
#include "net/host_forwarding.h"
#include "net/netns.h"
#include "net/sock_destroy.h"
#include "sys/mount_api.h"
#include "sys/sched_priority.h"

namespace warren::net {
namespace {

constexpr size_t kMaxResolvedPerSandbox = 4096;
constexpr size_t kMaxAddrsPerAnswer = 16;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string VethName(uint32_t ip) {
  char buf[16];
  snprintf(buf, sizeof buf, "wv%08x", ntohl(ip));
  return buf;
}

Status ParseSubnet(const std::string& s, uint32_t* net, int* prefix) {
  auto rule = ParseRule(s);
  if (!rule.ok() || rule->is_domain() || rule->family != AF_INET || rule->prefix < 8 ||
      rule->prefix > 28)
    return Invalid("network subnet must be an IPv4 CIDR from /8 to /28", s);
  memcpy(net, rule->addr.data(), 4);
  *prefix = rule->prefix;
  return Status::Ok();
}

}  // namespace

Status Network::CheckSubnetFree() {
  // Another link with an address in our subnet (another node, a VPN) would make routing to
  // sandboxes ambiguous: refuse rather than misroute.
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return ErrnoStatus("getifaddrs", opts_.subnet);
  std::vector<std::pair<std::string, uint32_t>> clashes;
  const uint32_t mask = htonl(~0u << (32 - prefix_));
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || opts_.bridge == a->ifa_name) continue;
    uint32_t addr = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
    if ((addr & mask) == subnet_) clashes.emplace_back(a->ifa_name, addr);
  }
  freeifaddrs(list);
  for (const auto& [link, addr] : clashes) {
    BridgeInspection found = InspectBridge(link);
    // The veths of a dead node's pooled namespaces go when the kernel gets round to tearing
    // the namespaces down (a second or so); a sandbox's stays as long as the sandbox.
    for (int i = 0; i < 30 && found.owner == BridgeInspection::Owner::kDead && found.ports > 0;
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      found = InspectBridge(link);
    }
    const std::string clash = link + " has " + Ip4String(addr);
    if (found.owner == BridgeInspection::Owner::kDead && found.ports == 0) {
      WARREN_RETURN_IF_ERROR(ReclaimDeadBridge(link, found));
      continue;
    }
    if (found.owner == BridgeInspection::Owner::kDead)
      return Status(Code::kConflict, "claim sandbox subnet", opts_.subnet,
                    clash + ", the bridge of a warren daemon that stopped while " +
                        std::to_string(found.ports) +
                        " of its sandboxes still use it (start it again on its data dir, "
                        "or pick another subnet with --net-subnet)");
    return Status(Code::kConflict, "claim sandbox subnet", opts_.subnet,
                  clash + " (another node or network uses it; pick another with --net-subnet)");
  }
  return Status::Ok();
}

Status Network::ReclaimDeadBridge(const std::string& link, const BridgeInspection& found) {
  spdlog::warn(
      "taking back subnet {} from {}, the idle bridge of a warren daemon that died "
      "(nftables table {})",
      opts_.subnet, link, found.table);
  if (const int index = host_nl_->Index(link); index != 0) {
    Status st = host_nl_->DeleteLink(index);
    if (!st.ok() && host_nl_->Index(link) != 0) return st.Context("claim sandbox subnet");
  }
  // Its table would keep masquerading and filtering for a subnet that is ours now.
  WARREN_RETURN_IF_ERROR(Firewall::DropTable(found.table));
  unlink(found.lock_path.c_str());
  return Status::Ok();
}

Result<std::unique_ptr<Network>> Network::Start(const NetworkOptions& opts) {
  std::unique_ptr<Network> n(new Network(opts));
  WARREN_RETURN_IF_ERROR(n->Init());
  n->bare_ = std::make_unique<BareNetnsPool>(
      BareNetnsOptions{.ipv6 = n->ipv6_, .target = opts.pool_bare, .keep = 2 * opts.pool_bare});
  n->filler_ = std::thread([p = n.get()] { p->FillPool(); });
  return n;
}

Status Network::Init() {
  WARREN_RETURN_IF_ERROR(ParseSubnet(opts_.subnet, &subnet_, &prefix_));
  gateway_ = htonl(ntohl(subnet_) + 1);
  if (opts_.bridge.empty() || opts_.bridge.size() > 15)
    return Invalid("bad bridge name", opts_.bridge);
  host_nl_ = std::make_unique<RtNetlink>(WARREN_TRY(RtNetlink::Open()));
  if (!opts_.state_dir.empty())
    owner_.emplace(WARREN_TRY(BridgeOwnerLock::Acquire(opts_.state_dir + ".lock")));
  WARREN_RETURN_IF_ERROR(CheckSubnetFree());
  // NAT out needs forwarding; sandboxes are the only thing routed through here that the
  // firewall does not refuse.
  forwarding_was_off_ = WARREN_TRY(TurnOnHostForwarding());
  forwarding_on_ = true;
  bool forwarding6_was_off = false;
  if (opts_.ipv6) {
    auto f6 = TurnOnHostForwarding6();
    if (!f6.ok()) {
      spdlog::warn("sandboxes get no IPv6: {}", f6.status().ToString());
    } else if (*f6 == Forwarding6::kUnavailable) {
      spdlog::info(
          "sandboxes get no IPv6: the host has none, or cannot forward it for them alone "
          "(force_forwarding, Linux 6.17)");
    } else {
      ipv6_ = forwarding6_on_ = true;
      forwarding6_was_off = *f6 == Forwarding6::kWasOff;
    }
  }
  bridge_index_ = host_nl_->Index(opts_.bridge);
  if (bridge_index_ == 0) {
    WARREN_RETURN_IF_ERROR(host_nl_->CreateBridge(opts_.bridge));
    bridge_index_ = host_nl_->Index(opts_.bridge);
    if (bridge_index_ == 0) return Internal("create bridge", opts_.bridge, "it did not appear");
  }
  // A bridge left by a killed run of this node (its name comes from our data dir) is kept:
  // adopted sandboxes' veths hang on it. Either way it is ours to remove at a clean stop.
  made_bridge_ = true;
  // A fixed address: a bridge otherwise takes the lowest of its ports' addresses, which
  // changes as sandboxes come and go and leaves every sandbox's ARP entry for the gateway
  // pointing nowhere. Locally administered, from the bridge's name (stable across restarts).
  {
    std::string h = Sha256Hex(opts_.bridge);
    uint8_t mac[6] = {0x02};
    for (int i = 1; i < 6; ++i)
      mac[i] =
          static_cast<uint8_t>(std::stoi(h.substr(static_cast<size_t>(2 * i), 2), nullptr, 16));
    WARREN_RETURN_IF_ERROR(host_nl_->SetMac(bridge_index_, mac));
  }
  if (owner_)
    WARREN_RETURN_IF_ERROR(
        host_nl_->SetAlias(bridge_index_, BridgeOwnerAlias(owner_->path(), opts_.table)));
  // Every node's bridge in one link group: a firewall that forwards only sandbox traffic
  // knows the other nodes' sandboxes by it.
  WARREN_RETURN_IF_ERROR(host_nl_->SetGroup(bridge_index_, kSandboxBridgeGroup));
  WARREN_RETURN_IF_ERROR(host_nl_->AddAddress4(bridge_index_, gateway_, prefix_));
  WARREN_RETURN_IF_ERROR(host_nl_->SetUp(bridge_index_, true));
  (void)WriteNetSysctl("net/ipv4/conf/" + opts_.bridge + "/send_redirects", "0");
  const std::string bridge6 = "net/ipv6/conf/" + opts_.bridge + "/";
  if (ipv6_) {
    // The gateway of sandboxes' IPv6, and nothing else: it learns no routes or addresses
    // from the bridge (a sandbox cannot send router advertisements, but nor should it try).
    for (const char* key : {"accept_ra", "autoconf", "accept_dad"})
      (void)WriteNetSysctl(bridge6 + key, "0");
    WARREN_RETURN_IF_ERROR(WriteNetSysctl(bridge6 + "disable_ipv6", "0"));
    WARREN_RETURN_IF_ERROR(host_nl_->AddAddress6(bridge_index_, gateway6(), 96 + prefix_));
  } else {
    (void)WriteNetSysctl(bridge6 + "disable_ipv6", "1");
  }
  FirewallConfig fc;
  fc.table = opts_.table;
  fc.bridge = opts_.bridge;
  fc.subnet = subnet_;
  fc.prefix = prefix_;
  fc.gateway = gateway_;
  fc.proxy_port = opts_.proxy_port;
  fc.forward_only_sandboxes = forwarding_was_off_;
  fc.ipv6 = ipv6_;
  fc.forward_only_sandboxes6 = forwarding6_was_off;
  firewall_ = WARREN_TRY(Firewall::Create(fc));
  resolver_ = WARREN_TRY(Resolver::Create(opts_.dns_hosts, opts_.dns_upstream));
  dns_ = WARREN_TRY(DnsServer::Start(gateway_, 53, this, resolver_.get()));
  ProxyOptions po;
  po.addr = gateway_;
  po.port = opts_.proxy_port;
  po.subnet = subnet_;
  po.prefix = prefix_;
  po.cache_dir = opts_.cache_dir;  // empty: nothing is cached
  po.cache_bytes = opts_.cache_bytes;
  po.intercept = opts_.intercept;
  po.ca_dir = opts_.ca_dir;
  po.upstream_ca = opts_.upstream_ca;
  po.fresh = opts_.fresh;
  proxy_ = WARREN_TRY(EgressProxy::Start(po, this, resolver_.get()));
  if (!opts_.state_dir.empty() && mkdir(opts_.state_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", opts_.state_dir);
  return Status::Ok();
}

Network::~Network() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (filler_.joinable()) filler_.join();
  dns_.reset();
  proxy_.reset();
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, sb] : sandboxes_) ids.push_back(id);
  }
  for (auto& id : ids) Detach(id);
  // Pooled namespaces die with their last fd, taking their veths along.
  bare_.reset();
  wired_.clear();
  firewall_.reset();
  if (made_bridge_ && host_nl_) (void)host_nl_->DeleteLink(bridge_index_);
  if (forwarding_on_ || forwarding6_on_) {
    const bool others = AnotherLiveBridge(opts_.bridge);
    if (forwarding_on_) RestoreHostForwarding(others);
    if (forwarding6_on_) RestoreHostForwarding6(others);
  }
  // Empty now that every sandbox is detached (a crash leaves it for the next run's adoption).
  if (!opts_.state_dir.empty()) rmdir(opts_.state_dir.c_str());
}

Result<uint16_t> Network::ServeMirrorPeers(const std::string& host, uint16_t port,
                                           const MirrorPeers* peers) {
  if (!proxy_) return Status(Code::kUnavailable, "serve package mirror peers", host, "no proxy");
  WARREN_RETURN_IF_ERROR(proxy_->ServePeers(host, port, peers));
  return proxy_->peer_port();
}

std::string Network::proxy_url() const {
  return "http://" + Ip4String(gateway_) + ":" + std::to_string(opts_.proxy_port);
}

Result<uint32_t> Network::AllocateIp() {
  std::lock_guard lock(mu_);
  const uint32_t hosts = (1u << (32 - prefix_)) - 2;  // .0 and broadcast excluded
  for (uint32_t i = 0; i < hosts; ++i) {
    uint32_t h = next_ip_;
    next_ip_ = next_ip_ + 1 > hosts ? 2 : next_ip_ + 1;
    if (h < 2 || used_ips_.count(h)) continue;  // .1 is the gateway
    used_ips_.insert(h);
    return htonl(ntohl(subnet_) + h);
  }
  return Status(Code::kQuota, "allocate address", opts_.subnet, "every address is in use");
}

void Network::ReleaseIp(uint32_t ip) {
  if (!ip) return;
  std::lock_guard lock(mu_);
  used_ips_.erase(ntohl(ip) - ntohl(subnet_));
}

Status Network::Wire(int netns_fd, uint32_t ip) {
  const std::string name = VethName(ip);
  {
    std::lock_guard lock(nl_mu_);
    WARREN_RETURN_IF_ERROR(host_nl_->CreateVeth(name, bridge_index_, "eth0", netns_fd));
    int idx = host_nl_->Index(name);
    Status st = idx ? host_nl_->SetBridgePortIsolated(idx)
                    : Internal("create veth", name, "it did not appear");
    if (!st.ok()) {
      if (idx) (void)host_nl_->DeleteLink(idx);
      return st;
    }
  }
  Status st = RunInNetns(netns_fd, [&]() -> Status {
    RtNetlink nl = WARREN_TRY(RtNetlink::Open());
    int idx = nl.Index("eth0");
    if (!idx) return Internal("wire sandbox", name, "eth0 did not appear");
    WARREN_RETURN_IF_ERROR(nl.AddAddress4(idx, ip, 32));
    if (ipv6_) WARREN_RETURN_IF_ERROR(nl.AddAddress6(idx, SandboxAddress6(ip), 128));
    return Status::Ok();
  });
  if (!st.ok()) {
    // Deleting our end takes eth0 along: a later attempt must not clash with it.
    std::lock_guard lock(nl_mu_);
    if (int idx = host_nl_->Index(name)) (void)host_nl_->DeleteLink(idx);
  }
  return st;
}

Status Network::SetLink(int netns_fd, bool egress) {
  return RunInNetns(netns_fd, [&]() -> Status {
    RtNetlink nl = WARREN_TRY(RtNetlink::Open());
    int idx = nl.Index("eth0");
    if (!idx) return Internal("set sandbox link", "eth0", "missing");
    // Down takes the routes along: a sandbox in mode none gets "Network is unreachable" at
    // once from connect(), not a timeout.
    WARREN_RETURN_IF_ERROR(nl.SetUp(idx, egress));
    if (egress) WARREN_RETURN_IF_ERROR(nl.AddDefaultRoute4(idx, gateway_));
    if (egress && ipv6_) WARREN_RETURN_IF_ERROR(nl.AddDefaultRoute6(idx, gateway6()));
    return Status::Ok();
  });
}

Result<Network::Pooled> Network::MakeNamespace(bool wired) {
  BareNetns made = WARREN_TRY(BareNetnsPool::Make(ipv6_));
  Pooled p{std::move(made.netns), std::move(made.sysfs)};
  if (wired) {
    p.ip = WARREN_TRY(AllocateIp());
    Status st = Wire(p.netns.get(), p.ip);
    if (st.ok()) st = SetLink(p.netns.get(), true);
    if (!st.ok()) {
      ReleaseIp(p.ip);
      return st;
    }
  }
  return p;
}

void Network::FillPool() {
  // Refilling is background work: a create that finds the pool empty makes its namespace
  // itself, at its own priority.
  if (Status st = sys::SetBackgroundPriority(0); !st.ok())
    spdlog::warn("network pool: {}", st.ToString());
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait_for(lock, std::chrono::seconds(5),
                 [&] { return stop_ || wired_.size() < opts_.pool_wired; });
    if (stop_) return;
    if (wired_.size() >= opts_.pool_wired) continue;
    lock.unlock();
    auto p = MakeNamespace(true);
    lock.lock();
    if (!p.ok()) {
      spdlog::warn("network pool: {}", p.status().ToString());
      cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_; });
      continue;
    }
    wired_.push_back(std::move(*p));
  }
}

Result<Attachment> Network::Attach(const std::string& id, const Policy& policy, bool keep_link) {
  const auto t0 = std::chrono::steady_clock::now();
  Pooled p;
  {
    std::lock_guard lock(mu_);
    if (sandboxes_.count(id))
      return Status(Code::kConflict, "attach network", id, "already attached");
    if (policy.egress && !wired_.empty()) {
      p = std::move(wired_.front());
      wired_.pop_front();
      ++pool_hits_;
    } else if (policy.egress) {
      ++pool_misses_;
    }
  }
  cv_.notify_all();
  bool made_now = !p.netns;
  if (!policy.egress) {
    bool waiting = false;  // else Take makes it now
    auto b = bare_->Take(&waiting);
    if (!b.ok()) return b.status().Context("attach network " + id);
    p.netns = std::move(b->netns);
    p.sysfs = std::move(b->sysfs);
    made_now = !waiting;
    std::lock_guard lock(mu_);
    ++(waiting ? pool_hits_ : pool_misses_);
  } else if (!p.netns) {
    auto made = MakeNamespace(policy.egress);
    if (!made.ok()) return made.status().Context("attach network " + id);
    p = std::move(*made);
  }
  auto sb = std::make_unique<Sandbox>();
  sb->netns = std::move(p.netns);
  sb->sysfs = std::move(p.sysfs);
  sb->ip = p.ip;
  sb->policy = policy;
  sb->keep_link = keep_link;
  if (sb->ip) {
    sb->firewall = firewall_->AddSandboxAsync(sb->ip, policy);
  }
  Attachment a{sb->netns.get(), sb->sysfs.get(), sb->ip, ipv6_ && sb->ip != 0};
  SaveRecord(id, *sb);
  const bool hit = !made_now;
  const uint64_t us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  std::lock_guard lock(mu_);
  (hit ? attach_hit_us_ : attach_miss_us_) += us;
  if (sb->ip) by_ip_[sb->ip] = id;
  sandboxes_[id] = std::move(sb);
  return a;
}

Status Network::Ready(const std::string& id) {
  std::shared_future<Status> f;
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return NotFound("sandbox network", id);
    f = it->second->firewall;
  }
  return f.valid() ? f.get() : Status::Ok();
}

void Network::Started(const std::string& id, int pid) {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return;
  it->second->pid = pid;
  it->second->netns.Reset();
  it->second->sysfs.Reset();
}

Result<UniqueFd> Network::OpenNetns(const Sandbox& sb) {
  if (sb.netns) {
    int fd = fcntl(sb.netns.get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return ErrnoStatus("dup", "network namespace");
    return UniqueFd(fd);
  }
  const std::string path = "/proc/" + std::to_string(sb.pid) + "/ns/net";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  return fd;
}

bool Network::Keeps(const Sandbox& sb, const RemoteEnd& end) const {
  if (!sb.policy.egress) return false;
  if (end.family == AF_INET && end.v4() == gateway_)
    return end.port == 53 || (end.proto == Proto::kTcp && end.port == opts_.proxy_port);
  if (sb.policy.AllowsAddress(end.family, end.addr.data(), end.port, end.proto)) return true;
  const Resolved* r = nullptr;
  if (end.family == AF_INET) {
    auto it = sb.resolved.find(end.v4());
    if (it != sb.resolved.end()) r = &it->second;
  } else {
    auto it = sb.resolved6.find(end.addr);
    if (it != sb.resolved6.end()) r = &it->second;
  }
  if (!r || r->expiry_ms < NowMs()) return false;
  for (const EgressRule* rule : sb.policy.RulesForName(r->name))
    if (rule->MatchesPort(end.port, end.proto)) return true;
  return false;
}

bool Network::NamedByAddressRule(const Policy& policy, int family, const uint8_t* addr) {
  for (const auto& rule : policy.rules)
    if (!rule.is_domain() && rule.family == family &&
        rule.MatchesAddress(family, addr, rule.port_lo,
                            rule.proto == Proto::kAny ? Proto::kTcp : rule.proto))
      return true;
  return false;
}

Status Network::SetPolicy(const std::string& id, const Policy& policy) {
  std::lock_guard change(change_mu_);
  Sandbox* sb;
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return NotFound("sandbox network", id);
    sb = it->second.get();
  }
  const std::string ctx = "set network of " + id;
  if (sb->firewall.valid()) WARREN_RETURN_IF_ERROR(sb->firewall.get());
  auto opened = OpenNetns(*sb);
  if (!opened.ok()) return opened.status().Context(ctx);
  UniqueFd netns = std::move(*opened);
  if (policy.egress && !sb->ip) {
    // First egress of a sandbox made in mode none: give it its link now.
    uint32_t ip = WARREN_TRY(AllocateIp());
    Status st = Wire(netns.get(), ip);
    if (st.ok()) {
      st = firewall_->AddSandbox(ip, policy);
      if (!st.ok()) {
        std::lock_guard lock(nl_mu_);
        if (int idx = host_nl_->Index(VethName(ip))) (void)host_nl_->DeleteLink(idx);
      }
    }
    if (!st.ok()) {
      ReleaseIp(ip);
      return st.Context(ctx);
    }
    std::lock_guard lock(mu_);
    sb->ip = ip;
    by_ip_[ip] = id;
  } else if (sb->ip) {
    WARREN_RETURN_IF_ERROR(firewall_->SetPolicy(sb->ip, policy).Context(ctx));
  }
  {
    std::lock_guard lock(mu_);
    sb->policy = policy;
  }
  Status link;
  if (sb->ip) {
    // A failure here still lets the cuts below run: the firewall holds the new policy.
    if (!sb->keep_link) link = SetLink(netns.get(), policy.egress).Context(ctx);
    // Names resolved before stay reachable if the new policy still allows them.
    const int64_t now = NowMs();
    auto still_allowed = [&](const Resolved& r) {
      return r.expiry_ms > now && !policy.RulesForName(r.name).empty();
    };
    std::vector<std::pair<uint32_t, Resolved>> keep;
    std::vector<std::pair<Ip6, Resolved>> keep6;
    {
      std::lock_guard lock(mu_);
      std::erase_if(sb->resolved, [&](const auto& kv) { return !still_allowed(kv.second); });
      std::erase_if(sb->resolved6, [&](const auto& kv) { return !still_allowed(kv.second); });
      keep.assign(sb->resolved.begin(), sb->resolved.end());
      keep6.assign(sb->resolved6.begin(), sb->resolved6.end());
    }
    auto ttl = [&](const Resolved& r) {
      return static_cast<uint32_t>((r.expiry_ms - now) / 1000 + 1);
    };
    for (auto& [addr, r] : keep)
      for (size_t k : DomainRuleIndexes(policy, r.name))
        (void)firewall_->AllowResolved(sb->ip, addr, k, ttl(r));
    for (auto& [addr, r] : keep6)
      for (size_t k : DomainRuleIndexes(policy, r.name))
        (void)firewall_->AllowResolved6(sb->ip, addr, k, ttl(r));
    // Cut the sandbox's own end of what is no longer allowed (it learns at once)...
    auto keep_fn = [&](const RemoteEnd& end) {
      std::lock_guard lock(mu_);
      return Keeps(*sb, end);
    };
    Status destroyed =
        RunInNetns(netns.get(), [&]() -> Status { return DestroySockets(keep_fn).status(); });
    if (!destroyed.ok()) spdlog::warn("{}: {}", ctx, destroyed.ToString());
    // ... and the host's: its connection tracking, so a packet still in flight is refused.
    auto cut = DeleteConnections(sb->ip, keep_fn);
    if (!cut.ok()) spdlog::warn("{}: {}", ctx, cut.status().ToString());
    if (proxy_) proxy_->Recheck(sb->ip);
  }
  SaveRecord(id, *sb);
  return link;
}

void Network::Detach(const std::string& id) {
  std::lock_guard change(change_mu_);
  std::unique_ptr<Sandbox> sb;
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return;
    sb = std::move(it->second);
    sandboxes_.erase(it);
    if (sb->ip) by_ip_.erase(sb->ip);
  }

  if (sb->firewall.valid()) sb->firewall.wait();  // its chain is loaded before it is removed
  if (sb->ip) {
    Status st = firewall_->RemoveSandbox(sb->ip);
    if (!st.ok()) spdlog::warn("detach network of {}: {}", id, st.ToString());
    // The address goes back to the pool: nothing of this sandbox may follow it.
    (void)DeleteConnections(sb->ip, [](const RemoteEnd&) { return false; });
    if (proxy_) proxy_->Recheck(sb->ip);
    ReleaseIp(sb->ip);
  }
  if (proxy_) proxy_->Forget(id);
  if (!opts_.state_dir.empty()) unlink((opts_.state_dir + "/" + id + ".json").c_str());
  // The namespace (and its veth) goes when the sandbox's last process and this fd are gone.
}

Status Network::Adopt(const std::string& id, int pid) {
  std::string doc;
  {
    const std::string path = opts_.state_dir + "/" + id + ".json";
    UniqueFd f(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f) return ErrnoStatus("open", path);
    char buf[65536];
    ssize_t n;
    while ((n = read(f.get(), buf, sizeof buf)) > 0) doc.append(buf, static_cast<size_t>(n));
    if (doc.empty()) return Invalid("empty network record", path);
  }
  nlohmann::json j = nlohmann::json::parse(doc, nullptr, false);
  if (!j.is_object()) return Invalid("bad network record", id);
  auto sb = std::make_unique<Sandbox>();
  sb->policy = WARREN_TRY(
      ParsePolicy(j.value("mode", "none"), j.value("allow", std::vector<std::string>{})));
  sb->keep_link = j.value("keep_link", false);
  sb->ip = j.value("ip", 0u);
  sb->pid = pid;
  WARREN_RETURN_IF_ERROR(OpenNetns(*sb).status().Context("adopt network of " + id));
  if (sb->ip) {
    {
      std::lock_guard lock(mu_);
      used_ips_.insert(ntohl(sb->ip) - ntohl(subnet_));
    }
    WARREN_RETURN_IF_ERROR(
        firewall_->AddSandbox(sb->ip, sb->policy).Context("adopt network of " + id));
  }
  std::lock_guard lock(mu_);
  if (sb->ip) by_ip_[sb->ip] = id;
  sandboxes_[id] = std::move(sb);
  return Status::Ok();
}

Status Network::Rename(const std::string& from, const std::string& to) {
  std::lock_guard change(change_mu_);
  Sandbox* sb;
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(from);
    if (it == sandboxes_.end()) return NotFound("sandbox network", from);
    if (sandboxes_.count(to))
      return Status(Code::kConflict, "rename network", to, "already attached");
    auto node = sandboxes_.extract(it);
    node.key() = to;
    sb = node.mapped().get();
    sandboxes_.insert(std::move(node));
    if (sb->ip) by_ip_[sb->ip] = to;
  }
  SaveRecord(to, *sb);
  if (!opts_.state_dir.empty()) unlink((opts_.state_dir + "/" + from + ".json").c_str());
  if (proxy_) proxy_->Forget(from);
  return Status::Ok();
}

void Network::SaveRecord(const std::string& id, const Sandbox& sb) {
  if (opts_.state_dir.empty()) return;
  nlohmann::json j = {{"ip", sb.ip},
                      {"mode", sb.policy.egress ? "egress" : "none"},
                      {"allow", sb.policy.Texts()},
                      {"keep_link", sb.keep_link}};
  const std::string path = opts_.state_dir + "/" + id + ".json", tmp = path + ".tmp", s = j.dump();
  UniqueFd f(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!f || write(f.get(), s.data(), s.size()) != static_cast<ssize_t>(s.size()) ||
      rename(tmp.c_str(), path.c_str()) != 0)
    spdlog::warn("save network record of {}: {}", id, strerror(errno));
}

bool Network::Egress(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(id);
  return it != sandboxes_.end() && it->second->policy.egress;
}

bool Network::PolicyOf(uint32_t ip, Policy* out, std::string* id) {
  std::lock_guard lock(mu_);
  auto it = by_ip_.find(ip);
  if (it == by_ip_.end()) return false;
  auto sb = sandboxes_.find(it->second);
  if (sb == sandboxes_.end()) return false;
  if (out) *out = sb->second->policy;
  if (id) *id = it->second;
  return true;
}

Resolution Network::AllowResolved(uint32_t ip, const std::string& name, const Resolution& r,
                                  uint32_t slack_s, int family) {
  // Under the change lock: a policy change in between would otherwise see its fresh sets
  // refilled from the old policy.
  std::lock_guard change(change_mu_);
  Resolution allowed;
  allowed.ttl_s = r.ttl_s;
  allowed.trusted = r.trusted;
  if (family == AF_INET6 && !ipv6_) return allowed;
  std::vector<size_t> rules;
  {
    std::lock_guard lock(mu_);
    auto it = by_ip_.find(ip);
    if (it == by_ip_.end()) return allowed;
    Sandbox* sb = sandboxes_[it->second].get();
    rules = DomainRuleIndexes(sb->policy, name);
    if (rules.empty()) return allowed;
    const int64_t now = NowMs(), expiry = now + int64_t{r.ttl_s + slack_s} * 1000;
    // Bounded per sandbox: a name that resolves to ever new addresses cannot grow our state
    // (or its set) without end. Expired entries go first.
    auto remember = [&](auto& resolved, const auto& a) {
      if (resolved.size() >= kMaxResolvedPerSandbox) {
        std::erase_if(resolved, [&](const auto& kv) { return kv.second.expiry_ms < now; });
        if (!resolved.count(a) && resolved.size() >= kMaxResolvedPerSandbox) return false;
      }
      auto& e = resolved[a];
      if (e.expiry_ms < expiry) e = Resolved{name, expiry};
      return true;
    };
    if (family == AF_INET) {
      for (uint32_t a : r.addrs) {
        if (allowed.addrs.size() >= kMaxAddrsPerAnswer) break;
        const auto* bytes = reinterpret_cast<const uint8_t*>(&a);
        if (!r.trusted && IsInternalAddress(a) && !NamedByAddressRule(sb->policy, AF_INET, bytes))
          continue;
        if (!remember(sb->resolved, a)) break;
        allowed.addrs.push_back(a);
      }
    } else {
      for (const Ip6& a : r.addrs6) {
        if (allowed.addrs6.size() >= kMaxAddrsPerAnswer) break;
        // The firewall refuses these whatever the rules say: no use answering them.
        if (IsNeverReachable6(a)) continue;
        if (!r.trusted && IsInternalAddress6(a) &&
            !NamedByAddressRule(sb->policy, AF_INET6, a.data()))
          continue;
        if (!remember(sb->resolved6, a)) break;
        allowed.addrs6.push_back(a);
      }
    }
  }
  const uint32_t ttl = r.ttl_s + slack_s;
  for (size_t k : rules) {
    for (uint32_t a : allowed.addrs) {
      Status st = firewall_->AllowResolved(ip, a, k, ttl);
      if (!st.ok()) spdlog::warn("allow {} for {}: {}", Ip4String(a), Ip4String(ip), st.ToString());
    }
    for (const Ip6& a : allowed.addrs6) {
      Status st = firewall_->AllowResolved6(ip, a, k, ttl);
      if (!st.ok()) spdlog::warn("allow {} for {}: {}", Ip6String(a), Ip4String(ip), st.ToString());
    }
  }
  return allowed;
}

nlohmann::json Network::Info() {
  std::lock_guard lock(mu_);
  nlohmann::json out = {
      {"bridge", opts_.bridge},
      {"subnet", opts_.subnet},
      {"gateway", Ip4String(gateway_)},
      {"ipv6", ipv6_},
      {"subnet6", ipv6_ ? nlohmann::json(Ip6String(SandboxAddress6(subnet_)) + "/" +
                                         std::to_string(96 + prefix_))
                        : nlohmann::json(nullptr)},
      {"sandboxes", sandboxes_.size()},
      {"wired", by_ip_.size()},
      {"dns", dns_ ? dns_->Stats() : nlohmann::json(nullptr)},
      {"proxy", proxy_ ? proxy_->Stats() : nlohmann::json(nullptr)},
      {"pool",
       {{"wired", wired_.size()},
        {"wired_target", opts_.pool_wired},
        {"hits", pool_hits_},
        {"misses", pool_misses_},
        // What attaching a sandbox took, on average, from the pool and without it.
        {"attach_us_hit", pool_hits_ ? attach_hit_us_ / pool_hits_ : 0},
        {"attach_us_miss", pool_misses_ ? attach_miss_us_ / pool_misses_ : 0}}}};
  out["pool"].update(bare_->Info());
  return out;
}

}  // namespace warren::net
