// The node's sandbox networking (docs/design.md, "Network"): a pool of network namespaces
// made ahead of time, a veth into the node's bridge with an address per sandbox for those in
// egress mode, NAT out, and the policy of each sandbox enforced by the firewall (addresses),
// the DNS resolver (names) and the egress proxy (HTTP/HTTPS), all on the host side.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "net/bare_netns_pool.h"
#include "net/bridge_owner.h"
#include "net/dns_server.h"
#include "net/egress_proxy.h"
#include "net/firewall.h"
#include "net/netlink.h"
#include "net/policy.h"
#include "net/remote_end.h"
#include "net/resolver.h"

namespace warren::net {

struct NetworkOptions {
  std::string bridge = "warren0";
  std::string table = "warren";  // nftables table
  std::string subnet = "10.89.0.0/16";
  uint16_t proxy_port = 3128;
  size_t pool_bare = 8;      // namespaces with only lo, for sandboxes in mode none
  size_t pool_wired = 4;     // namespaces with a veth and an address, for egress
  std::string state_dir;     // where each sandbox's network record lives (restart adoption)
  std::string dns_hosts;     // operator's name overrides, /etc/hosts format (net/resolver.h)
  std::string dns_upstream;  // "IP[:PORT]"; empty: the host's resolv.conf
  std::string cache_dir;     // the egress proxy's package cache; empty: none
  uint64_t cache_bytes = 10ull << 30;
  std::vector<std::string> intercept;  // HTTPS package hosts cached through the node CA
  std::string ca_dir;                  // where the node CA lives
  std::string upstream_ca;             // CAs the proxy trusts upstream (empty: the system's)
  FreshnessWindows fresh;              // how long registry metadata serves unasked
  // Sandboxes in egress mode get IPv6 too (SandboxAddress6 of their IPv4 address), where the
  // host has IPv6 and can forward it for them alone (net/host_forwarding.h).
  bool ipv6 = true;
};

// What a sandbox is given: the namespace to run in (the backend enters it) and its address.
struct Attachment {
  int netns_fd = -1;  // owned by the Network; valid until Detach
  int sysfs_fd = -1;  // a detached read-only sysfs of that namespace (-1: none), for /sys
  uint32_t ip = 0;    // network byte order; 0 until it is first wired for egress
  bool ipv6 = false;  // it has SandboxAddress6(ip) too, through gateway6()
};

class Network {
 public:
  static Result<std::unique_ptr<Network>> Start(const NetworkOptions& opts);
  ~Network();

  uint32_t gateway() const { return gateway_; }
  // Whether sandboxes get IPv6 on this node, and their IPv6 gateway (the bridge).
  bool ipv6() const { return ipv6_; }
  Ip6 gateway6() const { return SandboxAddress6(gateway_); }
  std::string proxy_url() const;
  // The node CA egress sandboxes trust for the proxy's HTTPS cache (empty: none).
  std::string ca_pem() const { return proxy_ ? proxy_->ca_pem() : std::string(); }
  bool has_ca() const { return proxy_ && proxy_->has_ca(); }
  // In a cluster: the proxy serves the package mirror's peers on HOST:PORT; the port it took.
  Result<uint16_t> ServeMirrorPeers(const std::string& host, uint16_t port,
                                    const MirrorPeers* peers);
  // Whether the sandbox `id` is in egress mode now.
  bool Egress(const std::string& id);
  const NetworkOptions& options() const { return opts_; }
  Resolver* resolver() { return resolver_.get(); }

  // A namespace for a new sandbox under `policy`; released by Detach (also on failure). Its
  // firewall chain is loaded in the background meanwhile (the sandbox runs nothing before
  // Ready, and without a chain every packet of it is refused anyway): Ready waits for it.
  // `keep_link`: a microVM's namespace, whose eth0 is bridged to the VM's tap: its link stays
  // up in mode none too (the firewall refuses with resets, so the guest fails fast; a down
  // link would make it wait for timeouts instead).
  Result<Attachment> Attach(const std::string& id, const Policy& policy, bool keep_link = false);
  Status Ready(const std::string& id);
  Status SetPolicy(const std::string& id, const Policy& policy);
  void Detach(const std::string& id);
  // The sandbox runs (its init is `pid`): the node keeps no fd of its network from now on
  // (thousands of sandboxes would otherwise cost thousands of fds); its namespace is found
  // through its init when needed.
  void Started(const std::string& id, int pid);
  // A sandbox made ahead of demand under a pool name takes its real id.
  Status Rename(const std::string& from, const std::string& to);
  // After a restart: the sandbox whose init is `pid` keeps its namespace and address.
  Status Adopt(const std::string& id, int pid);

  // For the resolver and the proxy: the policy of the sandbox at `ip` (false: none there).
  bool PolicyOf(uint32_t ip, Policy* out, std::string* id = nullptr);
  // The resolver found `r` for the allowed `name` asked by the sandbox at `ip`: the
  // addresses of `family` it may have (at most 16; none internal unless from the operator's
  // hosts file or named by an address rule; IPv6 only if the node gives sandboxes IPv6) are
  // made reachable, on the ports the name's rules give, for the answer's TTL plus `slack_s`.
  // Returns those addresses: the answer the sandbox gets.
  Resolution AllowResolved(uint32_t ip, const std::string& name, const Resolution& r,
                           uint32_t slack_s, int family);

  nlohmann::json Info();
  // Sandboxes' namespaces without a link, lent again when given back as new.
  BareNetnsPool* bare_pool() { return bare_.get(); }

 private:
  struct Pooled {
    UniqueFd netns;
    UniqueFd sysfs;
    uint32_t ip = 0;
  };
  struct Resolved {
    std::string name;
    int64_t expiry_ms = 0;  // steady clock
  };
  struct Sandbox {
    UniqueFd netns;  // until Started, or while the node works in it
    UniqueFd sysfs;
    int pid = 0;  // its init, once started
    bool keep_link = false;
    std::shared_future<Status> firewall;  // its chain being loaded (Attach)
    uint32_t ip = 0;
    Policy policy;
    std::map<uint32_t, Resolved> resolved;  // what its allowed names resolved to
    std::map<Ip6, Resolved> resolved6;
  };
  explicit Network(const NetworkOptions& opts) : opts_(opts) {}
  Status Init();
  // Refuses a subnet another link has an address in, after taking back the bridges of dead
  // nodes that no sandbox uses (net/bridge_owner.h).
  Status CheckSubnetFree();
  Status ReclaimDeadBridge(const std::string& link, const BridgeInspection& found);
  Result<Pooled> MakeNamespace(bool wired);
  Status Wire(int netns_fd, uint32_t ip);
  Status SetLink(int netns_fd, bool egress);
  // The sandbox's namespace: its own fd before it started, else opened through its init.
  Result<UniqueFd> OpenNetns(const Sandbox& sb);
  Result<uint32_t> AllocateIp();
  void ReleaseIp(uint32_t ip);
  void FillPool();
  void SaveRecord(const std::string& id, const Sandbox& sb);
  bool Keeps(const Sandbox& sb, const RemoteEnd& end) const;
  // Whether the policy's address rules name `addr` (an internal address DNS may then give).
  static bool NamedByAddressRule(const Policy& policy, int family, const uint8_t* addr);

  NetworkOptions opts_;
  // Held for the network's whole life (first in, last out): the bridge's alias names it.
  std::optional<BridgeOwnerLock> owner_;
  uint32_t subnet_ = 0, gateway_ = 0;  // network byte order
  int prefix_ = 16;
  std::unique_ptr<RtNetlink> host_nl_;
  std::mutex nl_mu_;
  int bridge_index_ = 0;
  bool made_bridge_ = false;
  bool forwarding_was_off_ = false;  // before any node turned it on (net/host_forwarding.h)
  bool forwarding_on_ = false;       // we turned it on: put back when we go, if we are last
  bool ipv6_ = false;                // sandboxes get IPv6
  bool forwarding6_on_ = false;
  std::unique_ptr<Firewall> firewall_;
  std::unique_ptr<Resolver> resolver_;
  std::unique_ptr<DnsServer> dns_;
  std::unique_ptr<EgressProxy> proxy_;

  std::mutex change_mu_;  // one policy change (or detach) at a time
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::unique_ptr<BareNetnsPool> bare_;  // for mode none (lo only)
  std::deque<Pooled> wired_;
  std::map<std::string, std::unique_ptr<Sandbox>> sandboxes_;
  std::map<uint32_t, std::string> by_ip_;
  std::set<uint32_t> used_ips_;  // host order
  uint32_t next_ip_ = 2;         // host part, host order
  uint64_t pool_hits_ = 0, pool_misses_ = 0;
  uint64_t attach_hit_us_ = 0, attach_miss_us_ = 0;
  std::thread filler_;
};

}  // namespace warren::net
