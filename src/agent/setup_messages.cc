#include "agent/setup_messages.h"

#include <set>
#include <tuple>

namespace warren::agent {

using nlohmann::json;

namespace {

// Strict reading of one message's header: every key known, every required key there, each of
// the right type. Errors name the message and the key.
class Reader {
 public:
  Reader(const json& j, std::string what) : j_(j), what_(std::move(what)) {}

  Status Keys(const std::set<std::string>& required, const std::set<std::string>& optional) const {
    if (!j_.is_object()) return Bad("", "is not an object");
    for (const auto& item : j_.items())
      if (!required.count(item.key()) && !optional.count(item.key()))
        return Bad(item.key(), "is not a known key");
    for (const auto& k : required)
      if (!j_.contains(k)) return Bad(k, "is missing");
    return Status::Ok();
  }
  bool Has(const char* k) const { return j_.contains(k); }

  Result<std::string> Str(const char* k) const {
    if (!j_[k].is_string()) return Bad(k, "must be a string");
    return j_[k].get<std::string>();
  }
  Result<bool> Bool(const char* k) const {
    if (!j_[k].is_boolean()) return Bad(k, "must be true or false");
    return j_[k].get<bool>();
  }
  Result<uint64_t> U64(const char* k) const {
    if (!j_[k].is_number_unsigned() && !(j_[k].is_number_integer() && j_[k].get<int64_t>() >= 0))
      return Bad(k, "must be an unsigned integer");
    return j_[k].get<uint64_t>();
  }
  Result<int64_t> I64(const char* k) const {
    if (!j_[k].is_number_integer()) return Bad(k, "must be an integer");
    return j_[k].get<int64_t>();
  }
  Result<std::map<std::string, std::string>> StrMap(const char* k) const {
    if (!j_[k].is_object()) return Bad(k, "must be an object of strings");
    std::map<std::string, std::string> out;
    for (const auto& item : j_[k].items()) {
      if (!item.value().is_string())
        return Bad(std::string(k) + "." + item.key(), "must be a string");
      out[item.key()] = item.value().get<std::string>();
    }
    return out;
  }
  Result<std::vector<std::string>> StrList(const char* k) const {
    if (!j_[k].is_array()) return Bad(k, "must be an array of strings");
    std::vector<std::string> out;
    for (const auto& v : j_[k]) {
      if (!v.is_string()) return Bad(k, "must be an array of strings");
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  const json& At(const char* k) const { return j_[k]; }

  Status Bad(const std::string& key, const std::string& why) const {
    return Invalid(what_ + (key.empty() ? "" : ": `" + key + "`") + " " + why, "agent protocol");
  }

 private:
  const json& j_;
  std::string what_;
};

Result<VmSetup::Net> ParseNet(const json& j) {
  Reader r(j, "setup.vm.net");
  WARREN_RETURN_IF_ERROR(r.Keys({"ip", "gateway", "mac"}, {"ip6", "gateway6"}));
  VmSetup::Net n{WARREN_TRY(r.Str("ip")), WARREN_TRY(r.Str("gateway")), WARREN_TRY(r.Str("mac"))};
  if (r.Has("ip6")) n.ip6 = WARREN_TRY(r.Str("ip6"));
  if (r.Has("gateway6")) n.gateway6 = WARREN_TRY(r.Str("gateway6"));
  if (n.ip6.empty() != n.gateway6.empty())
    return Invalid("setup.vm.net", "ip6 and gateway6 come together");
  return n;
}

Result<VmSetup> ParseVm(const json& j) {
  Reader r(j, "setup.vm");
  WARREN_RETURN_IF_ERROR(
      r.Keys({"full_os", "layer_serials", "memory_bytes", "pids", "seed", "now_ns"}, {"net"}));
  VmSetup v;
  v.full_os = WARREN_TRY(r.Bool("full_os"));
  v.layer_serials = WARREN_TRY(r.StrList("layer_serials"));
  v.memory_bytes = WARREN_TRY(r.U64("memory_bytes"));
  v.pids = WARREN_TRY(r.U64("pids"));
  v.seed = WARREN_TRY(r.Str("seed"));
  v.now_ns = WARREN_TRY(r.I64("now_ns"));
  if (r.Has("net")) v.net = WARREN_TRY(ParseNet(r.At("net")));
  return v;
}

json NetJson(const VmSetup::Net& n) {
  json j = {{"ip", n.ip}, {"gateway", n.gateway}, {"mac", n.mac}};
  if (!n.ip6.empty()) j["ip6"] = n.ip6, j["gateway6"] = n.gateway6;
  return j;
}

json ToJson(const VmSetup& v) {
  json j = {{"full_os", v.full_os},
            {"layer_serials", v.layer_serials},
            {"memory_bytes", v.memory_bytes},
            {"pids", v.pids},
            {"seed", v.seed},
            {"now_ns", v.now_ns}};
  if (v.net) j["net"] = NetJson(*v.net);
  return j;
}

}  // namespace

json ToJson(const SetupMessage& m) {
  json files = json::array();
  for (const auto& f : m.files)
    files.push_back({{"path", f.path}, {"data", f.data}, {"mode", f.mode}});
  json j = {{"t", "setup"},
            {"hostname", m.hostname},
            {"disk_bytes", m.disk_bytes},
            {"layers", m.layers},
            {"tool_layers", m.tool_layers},
            {"loopback", m.loopback},
            {"files", std::move(files)},
            {"nofile", m.nofile},
            {"landlock", m.landlock},
            {"env", m.env},
            {"sysfs", m.sysfs},
            {"commands_cgroup", m.commands_cgroup},
            {"listen", m.listen}};
  if (m.privileged_channel) j["privileged_channel"] = true;
  if (m.vm) j["vm"] = ToJson(*m.vm);
  return j;
}

Result<SetupMessage> ParseSetup(const json& h) {
  Reader r(h, "setup");
  WARREN_RETURN_IF_ERROR(
      r.Keys({"t", "hostname", "disk_bytes", "layers", "tool_layers", "loopback", "files", "nofile",
              "landlock", "env", "sysfs", "commands_cgroup", "listen"},
             {"vm", "privileged_channel"}));
  if (WARREN_TRY(r.Str("t")) != "setup") return r.Bad("t", "must be setup");
  SetupMessage m;
  m.hostname = WARREN_TRY(r.Str("hostname"));
  m.disk_bytes = WARREN_TRY(r.U64("disk_bytes"));
  const uint64_t layers = WARREN_TRY(r.U64("layers"));
  if (layers > 1024) return r.Bad("layers", "is more than 1024");
  m.layers = static_cast<uint32_t>(layers);
  if (!r.At("tool_layers").is_array())
    return r.Bad("tool_layers", "must be an array of layer indexes");
  for (const auto& t : r.At("tool_layers")) {
    if (!t.is_number_unsigned() || t.get<uint64_t>() >= m.layers)
      return r.Bad("tool_layers", "must hold indexes below `layers`");
    m.tool_layers.push_back(t.get<uint32_t>());
  }
  m.loopback = WARREN_TRY(r.Bool("loopback"));
  if (!r.At("files").is_array()) return r.Bad("files", "must be an array");
  for (const auto& f : r.At("files")) {
    Reader fr(f, "setup.files[]");
    WARREN_RETURN_IF_ERROR(fr.Keys({"path", "data", "mode"}, {}));
    SetupFile file{WARREN_TRY(fr.Str("path")), WARREN_TRY(fr.Str("data")), 0};
    const uint64_t mode = WARREN_TRY(fr.U64("mode"));
    if (mode > 07777) return fr.Bad("mode", "must be at most 07777");
    if (file.path.empty() || file.path[0] != '/') return fr.Bad("path", "must be absolute");
    file.mode = static_cast<uint32_t>(mode);
    m.files.push_back(std::move(file));
  }
  m.nofile = WARREN_TRY(r.U64("nofile"));
  m.landlock = WARREN_TRY(r.Bool("landlock"));
  m.env = WARREN_TRY(r.StrMap("env"));
  m.sysfs = WARREN_TRY(r.Bool("sysfs"));
  m.commands_cgroup = WARREN_TRY(r.Bool("commands_cgroup"));
  m.listen = WARREN_TRY(r.Bool("listen"));
  if (r.Has("privileged_channel")) m.privileged_channel = WARREN_TRY(r.Bool("privileged_channel"));
  if (r.Has("vm")) {
    m.vm = WARREN_TRY(ParseVm(r.At("vm")));
    if (m.sysfs || m.commands_cgroup || m.listen)
      return r.Bad("vm", "carries no fds: no fd slot may be set");
    if (m.vm->layer_serials.size() != m.layers)
      return r.Bad("vm.layer_serials", "must name `layers` disks");
  }
  return m;
}

Result<std::vector<int>> SetupFdOrder(const SetupMessage& m, const std::vector<int>& layers,
                                      int sysfs, int commands_cgroup, int listen) {
  if (m.vm) return std::vector<int>{};
  if (layers.size() != m.layers)
    return Invalid("setup: " + std::to_string(layers.size()) + " layer fds for `layers` " +
                       std::to_string(m.layers),
                   "agent protocol");
  std::vector<int> out = layers;
  for (auto [flag, fd, name] : {std::tuple{m.sysfs, sysfs, "sysfs"},
                                std::tuple{m.commands_cgroup, commands_cgroup, "commands_cgroup"},
                                std::tuple{m.listen, listen, "listen"}}) {
    if (!flag) continue;
    if (fd < 0)
      return Invalid(std::string("setup: slot `") + name + "` is flagged without an fd",
                     "agent protocol");
    out.push_back(fd);
  }
  return out;
}

Result<SetupFds> TakeSetupFds(const SetupMessage& m, std::vector<UniqueFd> fds) {
  const size_t want = m.vm ? 0 : m.layers + m.sysfs + m.commands_cgroup + m.listen;
  if (fds.size() != want)
    return Invalid("setup: " + std::to_string(fds.size()) + " fds received, " +
                       std::to_string(want) + " expected",
                   "agent protocol");
  SetupFds out;
  size_t i = 0;
  if (!m.vm)
    for (; i < m.layers; ++i) out.layers.push_back(std::move(fds[i]));
  if (m.sysfs) out.sysfs = std::move(fds[i++]);
  if (m.commands_cgroup) out.commands_cgroup = std::move(fds[i++]);
  if (m.listen) out.listen = std::move(fds[i++]);
  return out;
}

json ToJson(const ReadyMessage& m) {
  json j = {{"t", "ready"}, {"setup_ms", m.setup_ms}, {"landlock_abi", m.landlock_abi}};
  if (!m.init.empty()) j["init"] = m.init;
  return j;
}

Result<ReadyMessage> ParseReady(const json& h) {
  Reader r(h, "ready");
  WARREN_RETURN_IF_ERROR(r.Keys({"t", "setup_ms", "landlock_abi"}, {"init"}));
  if (WARREN_TRY(r.Str("t")) != "ready") return r.Bad("t", "must be ready");
  ReadyMessage m;
  if (!r.At("setup_ms").is_object()) return r.Bad("setup_ms", "must be an object of integers");
  for (const auto& item : r.At("setup_ms").items()) {
    if (!item.value().is_number_integer())
      return r.Bad("setup_ms." + item.key(), "must be an integer");
    m.setup_ms[item.key()] = item.value().get<int64_t>();
  }
  const int64_t abi = WARREN_TRY(r.I64("landlock_abi"));
  if (abi < 0 || abi > 1000) return r.Bad("landlock_abi", "is out of range");
  m.landlock_abi = static_cast<int>(abi);
  if (r.Has("init")) m.init = WARREN_TRY(r.Str("init"));
  return m;
}

json ToJson(const AssignMessage& m) {
  return {{"t", "assign"}, {"hostname", m.hostname}, {"env", m.env}, {"nofile", m.nofile}};
}

Result<AssignMessage> ParseAssign(const json& h) {
  Reader r(h, "assign");
  WARREN_RETURN_IF_ERROR(r.Keys({"t", "hostname", "env", "nofile"}, {}));
  if (WARREN_TRY(r.Str("t")) != "assign") return r.Bad("t", "must be assign");
  return AssignMessage{WARREN_TRY(r.Str("hostname")), WARREN_TRY(r.StrMap("env")),
                       WARREN_TRY(r.U64("nofile"))};
}

json ToJson(const VmRefreshMessage& m) {
  json j = {{"t", "vm_refresh"},
            {"hostname", m.hostname},
            {"env", m.env},
            {"seed", m.seed},
            {"now_ns", m.now_ns}};
  if (m.net) j["net"] = NetJson(*m.net);
  return j;
}

Result<VmRefreshMessage> ParseVmRefresh(const json& h) {
  Reader r(h, "vm_refresh");
  WARREN_RETURN_IF_ERROR(r.Keys({"t", "hostname", "env", "seed", "now_ns"}, {"net"}));
  if (WARREN_TRY(r.Str("t")) != "vm_refresh") return r.Bad("t", "must be vm_refresh");
  VmRefreshMessage m;
  m.hostname = WARREN_TRY(r.Str("hostname"));
  m.env = WARREN_TRY(r.StrMap("env"));
  m.seed = WARREN_TRY(r.Str("seed"));
  if (m.seed.size() % 2 != 0 || m.seed.find_first_not_of("0123456789abcdef") != std::string::npos)
    return r.Bad("seed", "must be lowercase hex");
  m.now_ns = WARREN_TRY(r.I64("now_ns"));
  if (r.Has("net")) m.net = WARREN_TRY(ParseNet(r.At("net")));
  return m;
}

}  // namespace warren::agent
