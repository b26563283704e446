#include "isolation/seccomp_policy.h"

#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/unique_fd.h"

namespace warren::isolation {

extern const char kSeccompPolicyJson[];      // generated from policy/seccomp.json
extern const char kCallSeccompPolicyJson[];  // generated from policy/seccomp-call.json

const std::string& BuiltinSeccompPolicy() {
  static const std::string policy = kSeccompPolicyJson;
  return policy;
}

const std::string& CallSeccompPolicy() {
  static const std::string policy = kCallSeccompPolicyJson;
  return policy;
}

namespace {

using nlohmann::json;
using CtxPtr = std::unique_ptr<void, decltype(&seccomp_release)>;

Result<uint32_t> Action(const json& rule, const char* key, const std::string& where) {
  std::string a = rule.value(key, "");
  if (a == "allow") return SCMP_ACT_ALLOW;
  if (a == "kill_process") return SCMP_ACT_KILL_PROCESS;
  if (a == "kill_thread") return SCMP_ACT_KILL_THREAD;
  if (a == "errno") {
    static const std::map<std::string, int> kErrnos = {
        {"EPERM", EPERM}, {"ENOSYS", ENOSYS}, {"EACCES", EACCES}, {"EINVAL", EINVAL}};
    auto it = kErrnos.find(rule.value("errno", ""));
    if (it == kErrnos.end()) return Invalid("unknown errno in " + where);
    return SCMP_ACT_ERRNO(static_cast<uint32_t>(it->second));
  }
  return Invalid("unknown action `" + a + "` in " + where);
}

Result<scmp_arg_cmp> ArgCmp(const json& a, const std::string& where) {
  if (!a.is_object() || !a.contains("index") || !a.contains("op") || !a.contains("value"))
    return Invalid("argument rule needs index, op and value in " + where);
  unsigned idx = a["index"].get<unsigned>();
  if (idx > 5) return Invalid("argument index out of range in " + where);
  std::string op = a["op"].get<std::string>();
  uint64_t value = a["value"].get<uint64_t>();
  if (op == "eq") return SCMP_CMP(idx, SCMP_CMP_EQ, value);
  if (op == "ne") return SCMP_CMP(idx, SCMP_CMP_NE, value);
  if (op == "ge") return SCMP_CMP(idx, SCMP_CMP_GE, value);  // unsigned, all 64 bits
  if (op == "masked_eq")
    return SCMP_CMP(idx, SCMP_CMP_MASKED_EQ, a.value("mask", uint64_t{0}), value);
  return Invalid("unknown comparison `" + op + "` in " + where);
}

}  // namespace

Result<std::string> CompileSeccompPolicy(const std::string& policy_json,
                                         const std::string& profile) {
  json p = json::parse(policy_json, nullptr, false);
  if (p.is_discarded() || !p.is_object() || !p.contains("rules") || !p["rules"].is_array())
    return Invalid("seccomp policy must be an object with a rules array");
  uint32_t def = WARREN_TRY(Action(p, "default_action", "default_action"));
  CtxPtr ctx(seccomp_init(def), seccomp_release);
  if (!ctx) return Internal("seccomp_init", "policy", "failed");
  uint32_t bad_arch = WARREN_TRY(Action(p, "bad_arch_action", "bad_arch_action"));
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, bad_arch); rc != 0)
    return ErrnoStatus("seccomp_attr_set badarch", "policy", -rc);
  int n = 0;
  for (const json& rule : p["rules"]) {
    std::string where = "rule " + std::to_string(n++);
    if (!rule.contains("why") || rule["why"].get<std::string>().empty())
      return Invalid("every rule must say why it is there: " + where);
    bool skipped = false;
    for (const json& p : rule.value("skip_in", json::array())) skipped |= p == profile;
    if (skipped) continue;
    uint32_t action = WARREN_TRY(Action(rule, "action", where));
    // Each variant is one libseccomp rule; "masked_any" (any bit of a mask set) becomes one
    // variant per bit, since a rule can only compare for equality under a mask.
    std::vector<std::vector<scmp_arg_cmp>> variants(1);
    for (const json& a : rule.value("args", json::array())) {
      if (a.value("op", "") == "masked_any") {
        unsigned idx = a.value("index", 0u);
        uint64_t mask = a.value("mask", uint64_t{0});
        if (idx > 5 || mask == 0) return Invalid("bad masked_any argument rule in " + where);
        std::vector<std::vector<scmp_arg_cmp>> expanded;
        for (int bit = 0; bit < 64; ++bit) {
          if (!(mask >> bit & 1)) continue;
          for (auto v : variants) {
            v.push_back(SCMP_CMP(idx, SCMP_CMP_MASKED_EQ, uint64_t{1} << bit, uint64_t{1} << bit));
            expanded.push_back(std::move(v));
          }
        }
        variants = std::move(expanded);
        continue;
      }
      scmp_arg_cmp cmp = WARREN_TRY(ArgCmp(a, where));
      for (auto& v : variants) v.push_back(cmp);
    }
    for (const json& name : rule.value("names", json::array())) {
      std::string nm = name.get<std::string>();
      int nr = seccomp_syscall_resolve_name(nm.c_str());
      if (nr == __NR_SCMP_ERROR) continue;  // not a syscall on this arch (e.g. stime)
      for (const auto& args : variants) {
        int rc = seccomp_rule_add_array(ctx.get(), action, nr, static_cast<unsigned>(args.size()),
                                        args.empty() ? nullptr : args.data());
        if (rc != 0) return ErrnoStatus("seccomp_rule_add " + nm, where, -rc);
      }
    }
  }
  // Export through a memfd: libseccomp 2.5 writes BPF only to an fd.
  UniqueFd mem(memfd_create("warren-seccomp", MFD_CLOEXEC));
  if (!mem) return ErrnoStatus("memfd_create", "seccomp export");
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc != 0)
    return ErrnoStatus("seccomp_export_bpf", "policy", -rc);
  off_t size = lseek(mem.get(), 0, SEEK_END);
  std::string bpf(static_cast<size_t>(size), '\0');
  if (pread(mem.get(), bpf.data(), bpf.size(), 0) != size)
    return ErrnoStatus("read", "seccomp export");
  if (bpf.empty() || bpf.size() % 8 != 0)
    return Internal("seccomp export", "policy", "bad program size");
  return bpf;
}

}  // namespace warren::isolation
