// The egress firewall: one nftables table per node (libnftables, applied atomically), in
// the host's network namespace where no sandbox can reach it. Every sandbox has its own chain
// and two sets, keyed by its address:
//   rules  - address rules of its policy (CIDR . proto . port range)
//   dns    - addresses its allowed names resolved to, each expiring with its DNS answer
// A packet from the sandbox bridge is checked per connection (conntrack `new`), so a policy
// change cuts nothing by itself; the network manager deletes the conntrack entries of
// connections the new policy no longer allows, whose next packet is then checked again and
// refused. Everything else from the bridge is refused: other sandboxes, the host's own
// addresses (except the node's DNS resolver and egress proxy for egress sandboxes),
// IPv6, ICMP and every protocol but TCP and UDP.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "net/policy.h"

struct nft_ctx;

namespace warren::net {

struct FirewallConfig {
  std::string table;   // nft table name (inet family)
  std::string bridge;  // the sandbox bridge
  uint32_t subnet = 0; // network byte order
  int prefix = 16;
  uint32_t gateway = 0;       // the bridge's address: DNS resolver and proxy listen here
  uint16_t proxy_port = 3128;
};

class Firewall {
 public:
  // Replaces any table of the same name (a restarted node rebuilds its state).
  static Result<std::unique_ptr<Firewall>> Create(const FirewallConfig& cfg);
  ~Firewall();  // deletes the table

  // A sandbox's chain and sets, filled from `policy`.
  Status AddSandbox(uint32_t ip, const Policy& policy);
  // Refills its rules set, empties its dns set, turns egress on or off.
  Status SetPolicy(uint32_t ip, const Policy& policy);
  // `addr` (resolved from an allowed name under `rule`) reachable for `ttl_s` seconds.
  Status AllowResolved(uint32_t ip, uint32_t addr, const EgressRule& rule, uint32_t ttl_s);
  Status RemoveSandbox(uint32_t ip);

 private:
  explicit Firewall(const FirewallConfig& cfg) : cfg_(cfg) {}
  Status Run(const std::string& cmds, const std::string& op, const std::string& object);
  std::string RuleElements(const Policy& policy) const;
  std::string Chain(uint32_t ip) const;

  FirewallConfig cfg_;
  std::mutex mu_;
  nft_ctx* ctx_ = nullptr;
};

std::string Ip4String(uint32_t addr);  // network byte order

}  // namespace warren::net
