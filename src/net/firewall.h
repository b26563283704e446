// The egress firewall: one nftables table per node (libnftables, applied atomically), in
// the host's network namespace where no sandbox can reach it. Every sandbox has its own chain,
// jumped to by its address (IPv4, and IPv6 when the node gives sandboxes IPv6): a rule per
// address rule of its policy, and a rule per domain rule matching a set of the addresses that
// domain's names resolved to for this sandbox (filled by the DNS resolver, each address
// expiring with its answer; one set per family).
// A packet from the sandbox bridge is checked per connection (conntrack `new`), so a policy
// change cuts nothing by itself; the network manager deletes the conntrack entries of
// connections the new policy no longer allows, whose next packet is then checked again and
// refused. Everything else from the bridge is refused: other sandboxes, the host's own
// addresses (except the node's DNS resolver and egress proxy for egress sandboxes, and the
// neighbour discovery IPv6 needs to find the gateway), ICMP and every protocol but TCP and
// UDP, and IPv6 altogether on a node without sandbox IPv6.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "net/address_ranges.h"
#include "net/policy.h"

struct nft_ctx;

namespace warren::net {

struct FirewallConfig {
  std::string table;    // nft table name (inet family)
  std::string bridge;   // the sandbox bridge
  uint32_t subnet = 0;  // network byte order
  int prefix = 16;
  uint32_t gateway = 0;  // the bridge's address: DNS resolver and proxy listen here
  uint16_t proxy_port = 3128;
  bool forward_only_sandboxes = false;  // drop all other forwarded IPv4 traffic
  // Sandboxes have IPv6 too: SandboxAddress6 of their IPv4 address, in the /(96 + prefix)
  // SandboxAddress6(subnet), through the gateway SandboxAddress6(gateway).
  bool ipv6 = false;
  bool forward_only_sandboxes6 = false;  // drop all other forwarded IPv6 traffic
};

class Firewall {
 public:
  // Replaces any table of the same name (a restarted node rebuilds its state).
  static Result<std::unique_ptr<Firewall>> Create(const FirewallConfig& cfg);
  ~Firewall();  // deletes the table
  // Deletes the table `name` (inet) if there is one: what a node that died left behind.
  static Status DropTable(const std::string& name);

  // A sandbox's chain and sets, filled from `policy`.
  Status AddSandbox(uint32_t ip, const Policy& policy);
  // The same, done by the firewall's thread while the caller goes on.
  std::shared_future<Status> AddSandboxAsync(uint32_t ip, const Policy& policy);
  // Rebuilds its chain (resolved addresses start empty), turns egress on or off.
  Status SetPolicy(uint32_t ip, const Policy& policy);
  // `addr`, resolved from a name allowed by the policy's `domain_rule`-th domain rule (0-based,
  // counting domain rules only), reachable as that rule says for `ttl_s` seconds.
  Status AllowResolved(uint32_t ip, uint32_t addr, size_t domain_rule, uint32_t ttl_s);
  Status AllowResolved6(uint32_t ip, const Ip6& addr, size_t domain_rule, uint32_t ttl_s);
  Status RemoveSandbox(uint32_t ip);

 private:
  explicit Firewall(const FirewallConfig& cfg) : cfg_(cfg) {}
  Status Run(const std::string& cmds, const std::string& op, const std::string& object);
  std::string PolicyCommands(uint32_t ip, const Policy& policy, uint64_t gen) const;
  std::string Chain(uint32_t ip) const;
  std::string SetName(uint32_t ip, uint64_t gen, size_t k) const;
  std::string SetName6(uint32_t ip, uint64_t gen, size_t k) const;
  // The commands that delete a sandbox's domain sets of generation `gen`.
  std::string DeleteSets(uint32_t ip, uint64_t gen, size_t domains) const;
  // `addr` in the domain set `set` for `ttl_s` seconds (a fresh timeout if it was there).
  Status AddElement(const std::string& set, const std::string& addr, uint32_t ttl_s);

  FirewallConfig cfg_;
  // Every nftables command runs on one long-lived thread: libnftables on a fresh thread
  // (new stack, new malloc arena) costs 10-25 ms of page faults here, on a warm one ~0.1 ms.
  template <class F>
  auto OnThread(F f) -> std::future<decltype(f())>;
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
  nft_ctx* ctx_ = nullptr;
  // Per sandbox: the generation of its sets (new names on every policy, so one transaction
  // can drop the old and make the new) and how many domain sets it has.
  struct SbState {
    uint64_t gen = 0;
    size_t domains = 0;
  };
  std::mutex state_mu_;
  std::map<uint32_t, SbState> state_;
};

std::string Ip4String(uint32_t addr);  // network byte order

}  // namespace warren::net
