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

namespace {}  // namespace

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
  // Dropping a missing table fails; create it first so the delete always has a target.
  std::string rules =
      "add table " + t + "\n" + "delete table " + t + "\n" + "table " + t +
      " {\n"
      // sandbox address -> jump to its chain
      "  map sandboxes { type ipv4_addr : verdict; }\n"
      // sandboxes in egress mode: they may use the resolver and the proxy
      "  set egress_on { type ipv4_addr; }\n"
      "  chain input_hook {\n"
      "    type filter hook input priority filter - 5; policy accept;\n"
      "    iifname " +
      br +
      " jump from_sandbox_to_host\n"
      "    ip saddr " +
      subnet +
      " drop\n"  // a sandbox address from anywhere else is forged
      "  }\n"
      "  chain from_sandbox_to_host {\n"
      "    meta nfproto ipv6 drop\n"
      "    ip saddr != " +
      subnet +
      " drop\n"
      "    ct state established,related accept\n"
      "    ip saddr @egress_on ip daddr " +
      gw +
      " udp dport 53 accept\n"
      "    ip saddr @egress_on ip daddr " +
      gw + " tcp dport " + std::to_string(cfg.proxy_port) +
      " accept\n"
      "    meta l4proto tcp reject with tcp reset\n"
      "    reject with icmpx admin-prohibited\n"
      "  }\n"
      "  chain forward_hook {\n"
      "    type filter hook forward priority filter - 5; policy accept;\n"
      "    iifname " +
      br +
      " jump from_sandbox\n"
      "    oifname " +
      br +
      " jump to_sandbox\n"
      "    ip saddr " +
      subnet + " drop\n" +
      // The host did not forward before we turned forwarding on for sandboxes: it
      // still forwards nothing else. Another node's sandboxes on this host (its
      // bridge in the same link group) are that node's table's to judge.
      (cfg.forward_only_sandboxes
           ? "    meta iifgroup != " + std::to_string(kSandboxBridgeGroup) +
                 " meta oifgroup != " + std::to_string(kSandboxBridgeGroup) + " drop\n"
           : "") +
      "  }\n"
      "  chain from_sandbox {\n"
      "    meta nfproto ipv6 reject with icmpx admin-prohibited\n"
      "    ip saddr != " +
      subnet +
      " drop\n"
      "    ct state established,related accept\n"
      // a connection whose conntrack entry we deleted (no longer allowed): cut it
      "    ct state != new meta l4proto tcp reject with tcp reset\n"
      "    ct state != new drop\n"
      "    meta l4proto != { tcp, udp } reject with icmpx admin-prohibited\n"
      // other sandboxes, the bridge network, link-local (cloud metadata) and
      // multicast: never, whatever the rules say
      "    ip daddr { " +
      subnet +
      ", 169.254.0.0/16, 224.0.0.0/3, 0.0.0.0/8, 127.0.0.0/8 } "
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
      "    ip saddr " +
      subnet + " oifname != " + br +
      " masquerade\n"
      "  }\n"
      "}\n";
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

// The sandbox chain's body for `policy`: one rule per address rule (rules, not set elements:
// users' CIDRs may overlap, which interval sets refuse), one per domain rule matching the
// set its names' addresses land in. Sets of generation `gen` are created.
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
      const std::string set = SetName(ip, gen, k++);
      cmds += "add set " + t + " " + set + " { type ipv4_addr; flags timeout; size 4096; }\n";
      cmds += "add rule " + t + " " + c + " ip daddr @" + set + match(r) + " accept\n";
    } else if (r.family == AF_INET) {  // no IPv6 egress
      uint32_t a;
      memcpy(&a, r.addr.data(), 4);
      cmds += "add rule " + t + " " + c + " ip daddr " + Ip4String(a) + "/" +
              std::to_string(r.prefix) + match(r) + " accept\n";
    }
  }
  // Nothing matched: back in from_sandbox, which refuses (TCP reset, else ICMP).
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
  std::string cmds = "flush chain " + t + " " + c + "\n";
  for (size_t k = 0; k < st.domains; ++k)
    cmds += "delete set " + t + " " + SetName(ip, st.gen, k) + "\n";
  cmds += PolicyCommands(ip, policy, st.gen + 1);
  // "add" of a present element is fine; "delete" of an absent one is not: add first.
  cmds += "add element " + t + " egress_on { " + addr + " }\n";
  if (!policy.egress) cmds += "delete element " + t + " egress_on { " + addr + " }\n";
  WARREN_RETURN_IF_ERROR(Run(cmds, "set firewall policy", addr));
  st.gen += 1;
  st.domains = DomainRules(policy);
  return Status::Ok();
}

Status Firewall::AllowResolved(uint32_t ip, uint32_t a, size_t domain_rule, uint32_t ttl_s) {
  const std::string t = "inet " + cfg_.table;
  std::lock_guard lock(state_mu_);
  auto it = state_.find(ip);
  if (it == state_.end() || domain_rule >= it->second.domains)
    return Status::Ok();  // policy moved on
  const std::string set = t + " " + SetName(ip, it->second.gen, domain_rule);
  const std::string elem = "{ " + Ip4String(a) + " timeout " + std::to_string(ttl_s) + "s }";
  // Re-adding an element does not extend its timeout: add (so the delete finds it), delete
  // and add again, in one transaction.
  return Run("add element " + set + " " + elem + "\ndelete element " + set + " " + elem +
                 "\nadd element " + set + " " + elem + "\n",
             "allow resolved address", Ip4String(a));
}

Status Firewall::RemoveSandbox(uint32_t ip) {
  const std::string t = "inet " + cfg_.table, c = Chain(ip), addr = Ip4String(ip);
  std::lock_guard lock(state_mu_);
  auto it = state_.find(ip);
  if (it == state_.end()) return Status::Ok();
  std::string cmds = "add element " + t + " egress_on { " + addr +
                     " }\n"
                     "delete element " +
                     t + " egress_on { " + addr +
                     " }\n"
                     "delete element " +
                     t + " sandboxes { " + addr +
                     " }\n"
                     "flush chain " +
                     t + " " + c +
                     "\n"
                     "delete chain " +
                     t + " " + c + "\n";
  for (size_t k = 0; k < it->second.domains; ++k)
    cmds += "delete set " + t + " " + SetName(ip, it->second.gen, k) + "\n";
  Status s = Run(cmds, "remove sandbox from firewall", addr);
  state_.erase(it);
  return s;
}

}  // namespace warren::net
