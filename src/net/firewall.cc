#include "net/firewall.h"

#include <arpa/inet.h>
#include <nftables/libnftables.h>

#include <cstring>

#include "net/bridge_owner.h"

namespace warren::net {

std::string Ip4String(uint32_t addr) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr, buf, sizeof buf);
  return buf;
}

std::string Firewall::Chain(uint32_t ip) const { return "sb_" + std::to_string(ntohl(ip)); }

Result<std::unique_ptr<Firewall>> Firewall::Create(const FirewallConfig& cfg) {
  std::unique_ptr<Firewall> fw(new Firewall(cfg));
  fw->ctx_ = nft_ctx_new(NFT_CTX_DEFAULT);
  if (!fw->ctx_) return Internal("create nftables context", cfg.table, "nft_ctx_new failed");
  nft_ctx_buffer_output(fw->ctx_);
  nft_ctx_buffer_error(fw->ctx_);
  fw->thread_ = std::thread([p = fw.get()] { p->Loop(); });
  const std::string t = "inet " + cfg.table, br = "\"" + cfg.bridge + "\"";
  const std::string subnet = Ip4String(cfg.subnet) + "/" + std::to_string(cfg.prefix);
  const std::string gw = Ip4String(cfg.gateway);
  const std::string subnet6 =
      Ip6String(SandboxAddress6(cfg.subnet)) + "/" + std::to_string(96 + cfg.prefix);
  const std::string group = std::to_string(kSandboxBridgeGroup);
  // The host did not forward before we turned forwarding on for sandboxes: it still
  // forwards nothing else. Another node's sandboxes on this host (its bridge in the same
  // link group) are that node's table's to judge.
  auto forward_only = [&](const char* family) {
    return std::string("    meta nfproto ") + family + " meta iifgroup != " + group +
           " meta oifgroup != " + group + " drop\n";
  };
  std::string rules = "add table " + t + "\n" + "delete table " + t + "\n";
  rules += "table " + t + " {\n";
  // sandbox address -> jump to its chain
  rules += "  map sandboxes { type ipv4_addr : verdict; }\n";
  rules += "  map sandboxes6 { type ipv6_addr : verdict; }\n";
  // sandboxes in egress mode: they may use the resolver and the proxy
  rules += "  set egress_on { type ipv4_addr; }\n";

  rules += "  chain input_hook {\n";
  rules += "    type filter hook input priority filter - 5; policy accept;\n";
  rules += "    iifname " + br + " jump from_sandbox_to_host\n";
  // a sandbox address from anywhere else is forged
  rules += "    ip saddr " + subnet + " drop\n";
  if (cfg.ipv6) rules += "    ip6 saddr " + subnet6 + " drop\n";
  rules += "  }\n";

  rules += "  chain from_sandbox_to_host {\n";
  if (cfg.ipv6) {
    // A sandbox finds its gateway's link address, and answers the host's question for its
    // own: neighbour discovery only, which never leaves the link (hop limit 255). Its
    // other multicast (router solicitations, listener reports) is dropped without a word.
    rules +=
        "    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 "
        "accept\n";
    rules += "    ip6 daddr ff00::/8 drop\n";
    rules += "    ip6 saddr != { " + subnet6 + ", fe80::/10 } drop\n";
  } else {
    rules += "    meta nfproto ipv6 drop\n";
  }
  rules += "    ip saddr != " + subnet + " drop\n";
  rules += "    ct state established,related accept\n";
  rules += "    ip saddr @egress_on ip daddr " + gw + " udp dport 53 accept\n";
  rules += "    ip saddr @egress_on ip daddr " + gw + " tcp dport " +
           std::to_string(cfg.proxy_port) + " accept\n";
  rules += "    meta l4proto tcp reject with tcp reset\n";
  rules += "    reject with icmpx admin-prohibited\n";
  rules += "  }\n";

  rules += "  chain forward_hook {\n";
  rules += "    type filter hook forward priority filter - 5; policy accept;\n";
  rules += "    iifname " + br + " jump from_sandbox\n";
  rules += "    oifname " + br + " jump to_sandbox\n";
  rules += "    ip saddr " + subnet + " drop\n";
  if (cfg.ipv6) rules += "    ip6 saddr " + subnet6 + " drop\n";
  if (cfg.forward_only_sandboxes) rules += forward_only("ipv4");
  if (cfg.ipv6 && cfg.forward_only_sandboxes6) rules += forward_only("ipv6");
  rules += "  }\n";

  rules += "  chain from_sandbox {\n";
  if (cfg.ipv6)
    rules += "    ip6 saddr != " + subnet6 + " drop\n";
  else
    rules += "    meta nfproto ipv6 reject with icmpx admin-prohibited\n";
  rules += "    ip saddr != " + subnet + " drop\n";
  rules += "    ct state established,related accept\n";
  // a connection whose conntrack entry we deleted (no longer allowed): cut it
  rules += "    ct state != new meta l4proto tcp reject with tcp reset\n";
  rules += "    ct state != new drop\n";
  rules += "    meta l4proto != { tcp, udp } reject with icmpx admin-prohibited\n";
  // other sandboxes, the bridge network, link-local (cloud metadata) and multicast: never,
  // whatever the rules say. For IPv6 also the forms the kernel would carry over IPv4
  // (address_ranges.h, IsNeverReachable6).
  rules += "    ip daddr { " + subnet +
           ", 169.254.0.0/16, 224.0.0.0/3, 0.0.0.0/8, 127.0.0.0/8 } "
           "reject with icmpx admin-prohibited\n";
  if (cfg.ipv6) {
    // Sandboxes of every node (they all live in one /96), not only of this one.
    const std::string sandboxes6 = Ip6String(kSandboxPrefix6) + "/96";
    rules += "    ip6 daddr { " + sandboxes6 +
             ", ::/96, ::ffff:0:0/96, fe80::/10, fec0::/10, ff00::/8 } "
             "reject with icmpx admin-prohibited\n";
    rules += "    ip6 saddr vmap @sandboxes6\n";
  }
  rules += "    ip saddr vmap @sandboxes\n";
  rules += "    meta l4proto tcp reject with tcp reset\n";
  rules += "    reject with icmpx admin-prohibited\n";
  rules += "  }\n";

  rules += "  chain to_sandbox {\n";
  rules += "    ct state established,related accept\n";
  rules += "    drop\n";
  rules += "  }\n";

  rules += "  chain postrouting_hook {\n";
  rules += "    type nat hook postrouting priority srcnat; policy accept;\n";
  rules += "    ip saddr " + subnet + " oifname != " + br + " masquerade\n";
  if (cfg.ipv6) rules += "    ip6 saddr " + subnet6 + " oifname != " + br + " masquerade\n";
  rules += "  }\n";
  rules += "}\n";
  WARREN_RETURN_IF_ERROR(fw->Run(rules, "create nftables table", cfg.table));
  return fw;
}

Firewall::~Firewall() {
  if (ctx_)
    (void)Run("delete table inet " + cfg_.table + "\n", "delete nftables table", cfg_.table);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (ctx_) nft_ctx_free(ctx_);
}

Status Firewall::DropTable(const std::string& name) {
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (!ctx) return Internal("delete nftables table", name, "nft_ctx_new failed");
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  // Added first so that the delete always has a target.
  const std::string t = "inet " + name;
  const int rc =
      nft_run_cmd_from_buffer(ctx, ("add table " + t + "\ndelete table " + t + "\n").c_str());
  std::string err = nft_ctx_get_error_buffer(ctx);
  nft_ctx_free(ctx);
  if (rc == 0) return Status::Ok();
  if (err.size() > 400) err = err.substr(0, 400) + "...";
  return Internal("delete nftables table", name, "nftables refused: " + err);
}

void Firewall::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

template <class F>
auto Firewall::OnThread(F f) -> std::future<decltype(f())> {
  auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
  auto fut = task->get_future();
  {
    std::lock_guard lock(mu_);
    tasks_.push_back([task] { (*task)(); });
  }
  cv_.notify_one();
  return fut;
}

Status Firewall::Run(const std::string& cmds, const std::string& op, const std::string& object) {
  auto exec = [&]() -> Status {
    int rc = nft_run_cmd_from_buffer(ctx_, cmds.c_str());
    std::string err = nft_ctx_get_error_buffer(ctx_);
    (void)nft_ctx_get_output_buffer(ctx_);  // drain
    if (rc == 0) return Status::Ok();
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (err.size() > 400) err = err.substr(0, 400) + "...";
    return Internal(op, object, "nftables refused: " + err);
  };
  if (std::this_thread::get_id() == thread_.get_id()) return exec();  // AddSandboxAsync
  return OnThread(exec).get();
}

std::shared_future<Status> Firewall::AddSandboxAsync(uint32_t ip, const Policy& policy) {
  return OnThread([this, ip, policy] { return AddSandbox(ip, policy); }).share();
}

std::string Firewall::SetName(uint32_t ip, uint64_t gen, size_t k) const {
  return Chain(ip) + "_g" + std::to_string(gen) + "_d" + std::to_string(k);
}

std::string Firewall::SetName6(uint32_t ip, uint64_t gen, size_t k) const {
  return SetName(ip, gen, k) + "_6";
}

// The sandbox chain's body for `policy`: one rule per address rule (rules, not set elements:
// users' CIDRs may overlap, which interval sets refuse), one per domain rule and family
// matching the set its names' addresses land in. Sets of generation `gen` are created.
std::string Firewall::PolicyCommands(uint32_t ip, const Policy& policy, uint64_t gen) const {
  const std::string t = "inet " + cfg_.table, c = Chain(ip);
  std::string cmds;
  // Only TCP and UDP get this far (from_sandbox refuses the rest), so "any protocol" needs
  // no match at all, and a port match (th dport) is valid for both.
  auto match = [](const EgressRule& r) {
    std::string m;
    if (r.proto != Proto::kAny)
      m += std::string(" meta l4proto ") + (r.proto == Proto::kTcp ? "tcp" : "udp");
    if (r.port_lo != 0 || r.port_hi != 65535)
      m += " th dport " + (r.port_lo == r.port_hi
                               ? std::to_string(r.port_lo)
                               : std::to_string(r.port_lo) + "-" + std::to_string(r.port_hi));
    return m;
  };
  size_t k = 0;
  for (const auto& r : policy.rules) {
    if (r.is_domain()) {
      const std::string set = SetName(ip, gen, k);
      cmds += "add set " + t + " " + set + " { type ipv4_addr; flags timeout; size 4096; }\n";
      cmds += "add rule " + t + " " + c + " ip daddr @" + set + match(r) + " accept\n";
      if (cfg_.ipv6) {
        const std::string set6 = SetName6(ip, gen, k);
        cmds += "add set " + t + " " + set6 + " { type ipv6_addr; flags timeout; size 4096; }\n";
        cmds += "add rule " + t + " " + c + " ip6 daddr @" + set6 + match(r) + " accept\n";
      }
      ++k;
    } else if (r.family == AF_INET) {
      uint32_t a;
      memcpy(&a, r.addr.data(), 4);
      cmds += "add rule " + t + " " + c + " ip daddr " + Ip4String(a) + "/" +
              std::to_string(r.prefix) + match(r) + " accept\n";
    } else if (cfg_.ipv6) {
      Ip6 a;
      memcpy(a.data(), r.addr.data(), a.size());
      cmds += "add rule " + t + " " + c + " ip6 daddr " + Ip6String(a) + "/" +
              std::to_string(r.prefix) + match(r) + " accept\n";
    }
  }
  // Nothing matched: back in from_sandbox, which refuses (TCP reset, else ICMP).
  return cmds;
}

std::string Firewall::DeleteSets(uint32_t ip, uint64_t gen, size_t domains) const {
  const std::string t = "inet " + cfg_.table;
  std::string cmds;
  for (size_t k = 0; k < domains; ++k) {
    cmds += "delete set " + t + " " + SetName(ip, gen, k) + "\n";
    if (cfg_.ipv6) cmds += "delete set " + t + " " + SetName6(ip, gen, k) + "\n";
  }
  return cmds;
}

static size_t DomainRules(const Policy& p) {
  size_t n = 0;
  for (const auto& r : p.rules) n += r.is_domain();
  return n;
}

Status Firewall::AddSandbox(uint32_t ip, const Policy& policy) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip), addr = Ip4String(ip);
  std::lock_guard lock(state_mu_);
  SbState& st = state_[ip];
  st.gen += 1;
  std::string cmds = "add chain " + t + " " + c + "\nflush chain " + t + " " + c + "\n" +
                     PolicyCommands(ip, policy, st.gen) + "add element " + t + " sandboxes { " +
                     addr + " : jump " + c + " }\n";
  if (cfg_.ipv6)
    cmds += "add element " + t + " sandboxes6 { " + Ip6String(SandboxAddress6(ip)) + " : jump " +
            c + " }\n";
  if (policy.egress) cmds += "add element " + t + " egress_on { " + addr + " }\n";
  Status s = Run(cmds, "add sandbox to firewall", addr);
  if (!s.ok()) {
    state_.erase(ip);
    return s;
  }
  st.domains = DomainRules(policy);
  return s;
}

Status Firewall::SetPolicy(uint32_t ip, const Policy& policy) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip), addr = Ip4String(ip);
  std::lock_guard lock(state_mu_);
  auto it = state_.find(ip);
  if (it == state_.end()) return NotFound("firewall chain of", addr);
  SbState& st = it->second;
  // One transaction: there is no moment with neither the old nor the new policy.
  std::string cmds = "flush chain " + t + " " + c + "\n" + DeleteSets(ip, st.gen, st.domains);
  cmds += PolicyCommands(ip, policy, st.gen + 1);
  // "add" of a present element is fine; "delete" of an absent one is not: add first.
  cmds += "add element " + t + " egress_on { " + addr + " }\n";
  if (!policy.egress) cmds += "delete element " + t + " egress_on { " + addr + " }\n";
  WARREN_RETURN_IF_ERROR(Run(cmds, "set firewall policy", addr));
  st.gen += 1;
  st.domains = DomainRules(policy);
  return Status::Ok();
}

Status Firewall::AddElement(const std::string& set, const std::string& addr, uint32_t ttl_s) {
  const std::string s = "inet " + cfg_.table + " " + set;
  const std::string elem = "{ " + addr + " timeout " + std::to_string(ttl_s) + "s }";
  // Re-adding an element does not extend its timeout: add (so the delete finds it), delete
  // and add again, in one transaction.
  return Run("add element " + s + " " + elem + "\ndelete element " + s + " " + elem +
                 "\nadd element " + s + " " + elem + "\n",
             "allow resolved address", addr);
}

Status Firewall::AllowResolved(uint32_t ip, uint32_t a, size_t domain_rule, uint32_t ttl_s) {
  std::lock_guard lock(state_mu_);
  auto it = state_.find(ip);
  if (it == state_.end() || domain_rule >= it->second.domains)
    return Status::Ok();  // policy moved on
  return AddElement(SetName(ip, it->second.gen, domain_rule), Ip4String(a), ttl_s);
}

Status Firewall::AllowResolved6(uint32_t ip, const Ip6& a, size_t domain_rule, uint32_t ttl_s) {
  std::lock_guard lock(state_mu_);
  auto it = state_.find(ip);
  if (!cfg_.ipv6 || it == state_.end() || domain_rule >= it->second.domains)
    return Status::Ok();  // policy moved on, or no IPv6 here
  return AddElement(SetName6(ip, it->second.gen, domain_rule), Ip6String(a), ttl_s);
}

Status Firewall::RemoveSandbox(uint32_t ip) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip), addr = Ip4String(ip);
  std::lock_guard lock(state_mu_);
  auto it = state_.find(ip);
  if (it == state_.end()) return Status::Ok();
  std::string cmds = "add element " + t + " egress_on { " + addr + " }\n";
  cmds += "delete element " + t + " egress_on { " + addr + " }\n";
  cmds += "delete element " + t + " sandboxes { " + addr + " }\n";
  if (cfg_.ipv6)
    cmds += "delete element " + t + " sandboxes6 { " + Ip6String(SandboxAddress6(ip)) + " }\n";
  cmds += "flush chain " + t + " " + c + "\n";
  cmds += "delete chain " + t + " " + c + "\n";
  cmds += DeleteSets(ip, it->second.gen, it->second.domains);
  Status s = Run(cmds, "remove sandbox from firewall", addr);
  state_.erase(it);
  return s;
}

}  // namespace warren::net
