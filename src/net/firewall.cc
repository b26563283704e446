#include "net/firewall.h"

#include <arpa/inet.h>
#include <nftables/libnftables.h>

namespace warren::net {

std::string Ip4String(uint32_t addr) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr, buf, sizeof buf);
  return buf;
}

namespace {

std::string Protos(Proto p) {
  switch (p) {
    case Proto::kTcp: return "tcp";
    case Proto::kUdp: return "udp";
    default: return "";
  }
}

// "PROTO . LO-HI" elements for a rule: one per protocol it covers.
std::vector<std::string> ProtoPorts(const EgressRule& r) {
  std::string ports = r.port_lo == r.port_hi ? std::to_string(r.port_lo)
                                             : std::to_string(r.port_lo) + "-" + std::to_string(r.port_hi);
  std::vector<std::string> out;
  for (Proto p : {Proto::kTcp, Proto::kUdp})
    if (r.proto == Proto::kAny || r.proto == p) out.push_back(Protos(p) + " . " + ports);
  return out;
}

}  // namespace

std::string Firewall::Chain(uint32_t ip) const { return "sb_" + std::to_string(ntohl(ip)); }

Result<std::unique_ptr<Firewall>> Firewall::Create(const FirewallConfig& cfg) {
  std::unique_ptr<Firewall> fw(new Firewall(cfg));
  fw->ctx_ = nft_ctx_new(NFT_CTX_DEFAULT);
  if (!fw->ctx_) return Internal("create nftables context", cfg.table, "nft_ctx_new failed");
  nft_ctx_buffer_output(fw->ctx_);
  nft_ctx_buffer_error(fw->ctx_);
  const std::string t = "inet " + cfg.table, br = "\"" + cfg.bridge + "\"";
  const std::string subnet = Ip4String(cfg.subnet) + "/" + std::to_string(cfg.prefix);
  const std::string gw = Ip4String(cfg.gateway);
  // Dropping a missing table fails; create it first so the delete always has a target.
  std::string rules = "add table " + t + "\n" + "delete table " + t + "\n" +
      "table " + t + " {\n"
      // sandbox address -> jump to its chain
      "  map sandboxes { type ipv4_addr : verdict; }\n"
      // sandboxes in egress mode: they may use the resolver and the proxy
      "  set egress_on { type ipv4_addr; }\n"
      "  chain input_hook {\n"
      "    type filter hook input priority filter - 5; policy accept;\n"
      "    iifname " + br + " jump from_sandbox_to_host\n"
      "  }\n"
      "  chain from_sandbox_to_host {\n"
      "    meta nfproto ipv6 drop\n"
      "    ip saddr != " + subnet + " drop\n"
      "    ct state established,related accept\n"
      "    ip saddr @egress_on ip daddr " + gw + " udp dport 53 accept\n"
      "    ip saddr @egress_on ip daddr " + gw + " tcp dport { 53, " + std::to_string(cfg.proxy_port) + " } accept\n"
      "    meta l4proto tcp reject with tcp reset\n"
      "    reject with icmpx admin-prohibited\n"
      "  }\n"
      "  chain forward_hook {\n"
      "    type filter hook forward priority filter - 5; policy accept;\n"
      "    iifname " + br + " jump from_sandbox\n"
      "    oifname " + br + " jump to_sandbox\n"
      "  }\n"
      "  chain from_sandbox {\n"
      "    meta nfproto ipv6 reject with icmpx admin-prohibited\n"
      "    ip saddr != " + subnet + " drop\n"
      "    ct state established,related accept\n"
      // a connection whose conntrack entry we deleted (no longer allowed): cut it
      "    ct state != new meta l4proto tcp reject with tcp reset\n"
      "    ct state != new drop\n"
      "    meta l4proto != { tcp, udp } reject with icmpx admin-prohibited\n"
      // other sandboxes, the bridge network, link-local (cloud metadata) and multicast:
      // never, whatever the rules say
      "    ip daddr { " + subnet + ", 169.254.0.0/16, 224.0.0.0/3, 0.0.0.0/8, 127.0.0.0/8 } "
      "reject with icmpx admin-prohibited\n"
      "    ip saddr vmap @sandboxes\n"
      "    meta l4proto tcp reject with tcp reset\n"
      "    reject with icmpx admin-prohibited\n"
      "  }\n"
      "  chain to_sandbox {\n"
      "    ct state established,related accept\n"
      "    drop\n"
      "  }\n"
      "  chain postrouting_hook {\n"
      "    type nat hook postrouting priority srcnat; policy accept;\n"
      "    ip saddr " + subnet + " oifname != " + br + " masquerade\n"
      "  }\n"
      "}\n";
  WARREN_RETURN_IF_ERROR(fw->Run(rules, "create nftables table", cfg.table));
  return fw;
}

Firewall::~Firewall() {
  if (!ctx_) return;
  (void)Run("delete table inet " + cfg_.table + "\n", "delete nftables table", cfg_.table);
  nft_ctx_free(ctx_);
}

Status Firewall::Run(const std::string& cmds, const std::string& op, const std::string& object) {
  std::lock_guard lock(mu_);
  int rc = nft_run_cmd_from_buffer(ctx_, cmds.c_str());
  std::string err = nft_ctx_get_error_buffer(ctx_);
  (void)nft_ctx_get_output_buffer(ctx_);  // drain
  if (rc != 0) {
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (err.size() > 400) err = err.substr(0, 400) + "...";
    return Internal(op, object, "nftables refused: " + err);
  }
  return Status::Ok();
}

std::string Firewall::RuleElements(const Policy& policy) const {
  std::string out;
  for (const auto& r : policy.rules) {
    if (r.is_domain() || r.family != AF_INET) continue;  // names via DNS; no IPv6 egress
    std::string net = Ip4String(*reinterpret_cast<const uint32_t*>(r.addr.data())) + "/" + std::to_string(r.prefix);
    for (const auto& pp : ProtoPorts(r)) out += (out.empty() ? "" : ", ") + net + " . " + pp;
  }
  return out;
}

Status Firewall::AddSandbox(uint32_t ip, const Policy& policy) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip), addr = Ip4String(ip);
  std::string cmds =
      "add set " + t + " " + c + "_rules { type ipv4_addr . inet_proto . inet_service; flags interval; }\n"
      "add set " + t + " " + c + "_dns { type ipv4_addr . inet_proto . inet_service; flags interval,timeout; }\n"
      "add chain " + t + " " + c + "\n"
      "flush chain " + t + " " + c + "\n"
      "flush set " + t + " " + c + "_rules\n"
      "flush set " + t + " " + c + "_dns\n"
      "add rule " + t + " " + c + " ip daddr . meta l4proto . th dport @" + c + "_rules accept\n"
      "add rule " + t + " " + c + " ip daddr . meta l4proto . th dport @" + c + "_dns accept\n"
      "add element " + t + " sandboxes { " + addr + " : jump " + c + " }\n";
  std::string elems = RuleElements(policy);
  if (!elems.empty()) cmds += "add element " + t + " " + c + "_rules { " + elems + " }\n";
  if (policy.egress) cmds += "add element " + t + " egress_on { " + addr + " }\n";
  return Run(cmds, "add sandbox to firewall", addr);
}

Status Firewall::SetPolicy(uint32_t ip, const Policy& policy) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip), addr = Ip4String(ip);
  // Both in one transaction: there is no moment with neither the old nor the new policy.
  std::string cmds = "flush set " + t + " " + c + "_rules\nflush set " + t + " " + c + "_dns\n";
  std::string elems = RuleElements(policy);
  if (!elems.empty()) cmds += "add element " + t + " " + c + "_rules { " + elems + " }\n";
  // "add" of a present element and "delete" of an absent one: make both idempotent by
  // adding before deleting.
  cmds += "add element " + t + " egress_on { " + addr + " }\n";
  if (!policy.egress) cmds += "delete element " + t + " egress_on { " + addr + " }\n";
  return Run(cmds, "set firewall policy", addr);
}

Status Firewall::AllowResolved(uint32_t ip, uint32_t a, const EgressRule& rule, uint32_t ttl_s) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip);
  std::string elems;
  for (const auto& pp : ProtoPorts(rule))
    elems += (elems.empty() ? "" : ", ") + Ip4String(a) + " . " + pp + " timeout " + std::to_string(ttl_s) + "s";
  // Re-adding an element does not extend its timeout: delete it first (added first, so the
  // delete always finds it), all in one transaction.
  std::string cmds = "add element " + t + " " + c + "_dns { " + elems + " }\n" +
                     "delete element " + t + " " + c + "_dns { " + elems + " }\n" +
                     "add element " + t + " " + c + "_dns { " + elems + " }\n";
  return Run(cmds, "allow resolved address", Ip4String(a));
}

Status Firewall::RemoveSandbox(uint32_t ip) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip), addr = Ip4String(ip);
  std::string cmds = "add element " + t + " egress_on { " + addr + " }\n"
                     "delete element " + t + " egress_on { " + addr + " }\n"
                     "delete element " + t + " sandboxes { " + addr + " }\n"
                     "delete chain " + t + " " + c + "\n"
                     "delete set " + t + " " + c + "_rules\n"
                     "delete set " + t + " " + c + "_dns\n";
  return Run(cmds, "remove sandbox from firewall", addr);
}

}  // namespace warren::net
