#include "server/api_types.h"

#include <cmath>
#include <set>

#include "base/utf8.h"
#include "net/policy.h"
#include "node/node_selector.h"

namespace warren::server {
namespace {

// Checks that `j` is an object whose keys are all in `allowed`.
Status CheckFields(const json& j, const std::set<std::string>& allowed, const std::string& what) {
  if (!j.is_object()) return Invalid(what + " must be a JSON object");
  for (auto& [k, v] : j.items())
    if (!allowed.count(k)) return Invalid("unknown field `" + k + "` in " + what);
  return Status::Ok();
}

Status GetString(const json& j, const char* key, std::string* out, size_t max = 4096) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_string()) return Invalid(std::string("`") + key + "` must be a string");
  *out = j[key].get<std::string>();
  if (out->size() > max) return Invalid(std::string("`") + key + "` is too long");
  return Status::Ok();
}

Status GetOptString(const json& j, const char* key, std::optional<std::string>* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  std::string s;
  WARREN_RETURN_IF_ERROR(GetString(j, key, &s));
  *out = s;
  return Status::Ok();
}

Status GetUint(const json& j, const char* key, uint64_t* out, uint64_t lo, uint64_t hi) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  const json& v = j[key];
  if (!v.is_number_integer() &&
      !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    return Invalid(std::string("`") + key + "` must be an integer");
  if (v.is_number_integer() && v.get<int64_t>() < 0 && !v.is_number_unsigned())
    return Invalid(std::string("`") + key + "` must not be negative");
  double d = v.get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    return Invalid(std::string("`") + key + "` must be between " + std::to_string(lo) + " and " +
                   std::to_string(hi));
  *out = static_cast<uint64_t>(d);
  return Status::Ok();
}

Status GetDouble(const json& j, const char* key, double* out, double lo, double hi) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_number()) return Invalid(std::string("`") + key + "` must be a number");
  double d = j[key].get<double>();
  if (!(d >= lo && d <= hi))
    return Invalid(std::string("`") + key + "` must be between " + std::to_string(lo) + " and " +
                   std::to_string(hi));
  *out = d;
  return Status::Ok();
}

Status GetBool(const json& j, const char* key, bool* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_boolean()) return Invalid(std::string("`") + key + "` must be true or false");
  *out = j[key].get<bool>();
  return Status::Ok();
}

Status GetStringMap(const json& j, const char* key, std::map<std::string, std::string>* out,
                    size_t max_entries, bool env_names) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  const json& m = j[key];
  if (!m.is_object()) return Invalid(std::string("`") + key + "` must be an object of strings");
  if (m.size() > max_entries) return Invalid(std::string("`") + key + "` has too many entries");
  for (auto& [k, v] : m.items()) {
    if (!v.is_string()) return Invalid(std::string("`") + key + "." + k + "` must be a string");
    if (k.empty() || k.size() > 256) return Invalid(std::string("bad key in `") + key + "`");
    if (env_names && (k.find('=') != std::string::npos || k.find('\0') != std::string::npos))
      return Invalid("environment variable names must not contain `=` or NUL: " + k);
    std::string val = v.get<std::string>();
    if (val.find('\0') != std::string::npos)
      return Invalid(std::string("`") + key + "." + k + "` contains NUL");
    (*out)[k] = val;
  }
  return Status::Ok();
}

}  // namespace

Status ParseImageRef(const std::string& ref, std::string* name, std::string* tag) {
  size_t colon = ref.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == ref.size())
    return Invalid("image reference must be NAME:TAG", ref);
  *name = ref.substr(0, colon);
  *tag = ref.substr(colon + 1);
  auto ok = [](const std::string& s, bool slash) {
    if (s.empty() || s.size() > 128) return false;
    for (char c : s)
      if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
            (slash && c == '/')))
        return false;
    return true;
  };
  // Every '/'-separated part of a name starts with a letter or digit (no "..", no "/x").
  bool parts_ok = isalnum(static_cast<unsigned char>((*name)[0])) &&
                  name->find("/.") == std::string::npos && name->find("//") == std::string::npos &&
                  name->back() != '/';
  if (!ok(*name, true) || !ok(*tag, false) || !parts_ok)
    return Invalid("image names and tags use letters, digits, '.', '-', '_' (and '/' in names)",
                   ref);
  return Status::Ok();
}

Result<json> ParseJsonBody(const std::string& body) {
  if (body.empty()) return Invalid("request body must be a JSON object");
  try {
    // Depth is bounded by the body size limit; nlohmann parses iteratively enough for that.
    return json::parse(body);
  } catch (const json::parse_error& e) {
    return Invalid(std::string("malformed JSON: ") + e.what());
  }
}

Result<isolation::FsPolicy> ParseFsPolicy(const json& j) {
  WARREN_RETURN_IF_ERROR(CheckFields(j, {"read_only", "writable"}, "filesystem policy"));
  isolation::FsPolicy p;
  for (auto [key, out] :
       {std::pair{"read_only", &p.read_only}, std::pair{"writable", &p.writable}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_array())
      return Invalid(std::string("`filesystem.") + key + "` must be an array of paths");
    for (const auto& v : j[key]) {
      if (!v.is_string())
        return Invalid(std::string("`filesystem.") + key + "` must contain strings");
      out->push_back(v.get<std::string>());
    }
  }
  return isolation::NormalizeFsPolicy(std::move(p));
}

json ToJson(const isolation::FsPolicy& p) {
  return {{"read_only", p.read_only}, {"writable", p.writable}};
}

Result<SandboxSpec> ParseSandboxSpec(const json& j) {
  WARREN_RETURN_IF_ERROR(CheckFields(
      j, {"backend",       "image",      "workspace",     "tools",          "cpu",
          "memory_mb",     "disk_mb",    "pids",          "open_files",     "network",
          "filesystem",    "env",        "ttl_s",         "idle_timeout_s", "labels",
          "node_selector", "trajectory", "on_divergence", "lease",          "on_lease_expiry",
          "display"},
      "sandbox spec"));
  SandboxSpec s;
  std::string backend = runtime::BackendName(s.backend);
  WARREN_RETURN_IF_ERROR(GetString(j, "backend", &backend));
  if (auto kind = runtime::ParseBackendKind(backend))
    s.backend = *kind;
  else
    return Invalid("`backend` must be one of fncall, container, microvm, vm");
  WARREN_RETURN_IF_ERROR(GetString(j, "image", &s.image));
  if (s.image.empty()) return Invalid("`image` is required (NAME:TAG of a base layer)");
  std::string n, t;
  WARREN_RETURN_IF_ERROR(ParseImageRef(s.image, &n, &t));
  WARREN_RETURN_IF_ERROR(GetOptString(j, "workspace", &s.workspace));
  if (s.workspace) WARREN_RETURN_IF_ERROR(ParseImageRef(*s.workspace, &n, &t));
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array() || j["tools"].size() > 32)
      return Invalid("`tools` must be an array of at most 32 NAME:TAG strings");
    for (const auto& tool : j["tools"]) {
      if (!tool.is_string()) return Invalid("`tools` must contain strings");
      WARREN_RETURN_IF_ERROR(ParseImageRef(tool.get<std::string>(), &n, &t));
      s.tools.push_back(tool.get<std::string>());
    }
  }
  WARREN_RETURN_IF_ERROR(GetDouble(j, "cpu", &s.cpu, 0.01, Limits::kMaxCpu));
  WARREN_RETURN_IF_ERROR(
      GetUint(j, "memory_mb", &s.memory_mb, Limits::kMinMemoryMb, Limits::kMaxMemoryMb));
  WARREN_RETURN_IF_ERROR(GetUint(j, "disk_mb", &s.disk_mb, 1, Limits::kMaxDiskMb));
  WARREN_RETURN_IF_ERROR(GetUint(j, "pids", &s.pids, 8, Limits::kMaxPids));
  WARREN_RETURN_IF_ERROR(GetUint(j, "open_files", &s.open_files, 64, Limits::kMaxOpenFiles));
  if (j.contains("network") && !j["network"].is_null()) {
    const json& nw = j["network"];
    WARREN_RETURN_IF_ERROR(CheckFields(nw, {"mode", "allow"}, "network policy"));
    WARREN_RETURN_IF_ERROR(GetString(nw, "mode", &s.network.mode));
    if (s.network.mode != "none" && s.network.mode != "egress")
      return Invalid("`network.mode` must be none or egress");
    if (nw.contains("allow") && !nw["allow"].is_null()) {
      if (!nw["allow"].is_array()) return Invalid("`network.allow` must be an array of rules");
      for (const auto& r : nw["allow"]) {
        if (!r.is_string()) return Invalid("`network.allow` must contain strings");
        s.network.allow.push_back(r.get<std::string>());
      }
    }
    // Rules without a mode ask for egress limited to them.
    if ((!nw.contains("mode") || nw["mode"].is_null()) && !s.network.allow.empty())
      s.network.mode = "egress";
    if (s.network.mode == "none" && !s.network.allow.empty())
      return Invalid("`network.allow` rules need `network.mode` egress");
    WARREN_RETURN_IF_ERROR(net::ParsePolicy(s.network.mode, s.network.allow).status());
  }
  if (j.contains("filesystem") && !j["filesystem"].is_null())
    s.filesystem = WARREN_TRY(ParseFsPolicy(j["filesystem"]));
  // A whole machine's root keeps every capability: it could unmount a tool's guard or clear
  // an immutable flag, so neither integrity control can be promised there (SECURITY.md).
  const runtime::BackendTraits traits = runtime::TraitsOf(s.backend);
  if (!traits.guards_tools && traits.keeps_files && !s.tools.empty())
    return Invalid(
        "`tools` cannot be guarded in backend vm (its root keeps every capability and may unmount "
        "anything); use backend microvm, where tool layers are read-only");
  if (!traits.guards_tools && traits.keeps_files && !s.filesystem.empty())
    return Invalid(
        "`filesystem` cannot be enforced in backend vm (its root keeps every capability); use "
        "backend microvm");
  WARREN_RETURN_IF_ERROR(GetStringMap(j, "env", &s.env, 1024, true));
  size_t env_bytes = 0;
  for (const auto& [k, v] : s.env) env_bytes += k.size() + v.size() + 2;
  if (env_bytes > Limits::kMaxSandboxEnvBytes)
    return Invalid("`env` is larger than " + std::to_string(Limits::kMaxSandboxEnvBytes) +
                   " bytes (give large values per exec instead)");
  WARREN_RETURN_IF_ERROR(GetUint(j, "ttl_s", &s.ttl_s, 1, 30 * 86400));
  if (j.contains("idle_timeout_s") && !j["idle_timeout_s"].is_null()) {
    uint64_t v = 0;
    WARREN_RETURN_IF_ERROR(GetUint(j, "idle_timeout_s", &v, 1, 30 * 86400));
    s.idle_timeout_s = v;
  }
  WARREN_RETURN_IF_ERROR(GetStringMap(j, "labels", &s.labels, 64, false));
  for (auto& [k, v] : s.labels)
    if (k.size() > 63 || v.size() > 255 || k.find('=') != std::string::npos)
      return Invalid("label keys are at most 63 characters without `=`, values at most 255");
  WARREN_RETURN_IF_ERROR(GetStringMap(j, "node_selector", &s.node_selector, 16, false));
  for (auto& [k, v] : s.node_selector)
    if (!node::ValidLabelPart(k) || !node::ValidLabelPart(v))
      return Invalid("`node_selector` keys and values are 1-63 of [A-Za-z0-9._-]", k);
  WARREN_RETURN_IF_ERROR(GetOptString(j, "trajectory", &s.trajectory));
  if (s.trajectory) {
    bool ok = !s.trajectory->empty() && s.trajectory->size() <= 128;
    for (char c : *s.trajectory)
      if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != ':')
        ok = false;
    if (!ok) return Invalid("`trajectory` must be 1-128 letters, digits, `-`, `_`, `.` or `:`");
  }
  WARREN_RETURN_IF_ERROR(GetString(j, "on_divergence", &s.on_divergence));
  if (s.on_divergence != "continue" && s.on_divergence != "stop")
    return Invalid("`on_divergence` must be continue or stop");
  if (s.on_divergence == "stop" && !s.trajectory)
    return Invalid("`on_divergence: stop` needs a `trajectory` (only replayed steps re-run)");
  WARREN_RETURN_IF_ERROR(GetOptString(j, "lease", &s.lease));
  WARREN_RETURN_IF_ERROR(GetString(j, "on_lease_expiry", &s.on_lease_expiry));
  if (s.on_lease_expiry != "delete" && s.on_lease_expiry != "pause")
    return Invalid("`on_lease_expiry` must be delete or pause");
  if (j.contains("display") && !j["display"].is_null()) {
    const json& d = j["display"];
    if (!d.is_object()) return Invalid("`display` is {\"width\": W, \"height\": H}");
    WARREN_RETURN_IF_ERROR(CheckFields(d, {"width", "height"}, "display"));
    if (!d.contains("width") || !d.contains("height"))
      return Invalid("`display` needs both `width` and `height`");
    using agent::DisplaySize;
    uint64_t w = 1280, h = 800;
    WARREN_RETURN_IF_ERROR(GetUint(d, "width", &w, DisplaySize::kMin, DisplaySize::kMaxWidth));
    WARREN_RETURN_IF_ERROR(GetUint(d, "height", &h, DisplaySize::kMin, DisplaySize::kMaxHeight));
    // The X server of a container or microVM comes from the image and is started by the
    // agent; a whole machine's screen is QEMU's own; a call has none.
    if (s.backend == runtime::BackendKind::kFncall)
      return Invalid(
          "`display` is for the container, microvm and vm backends (a call has no "
          "screen)");
    s.display = DisplaySize{static_cast<uint16_t>(w), static_cast<uint16_t>(h)};
  }
  return s;
}

json ToJson(const SandboxSpec& s) {
  json j = {{"backend", runtime::BackendName(s.backend)},
            {"image", s.image},
            {"workspace", s.workspace ? json(*s.workspace) : json(nullptr)},
            {"tools", s.tools},
            {"cpu", s.cpu},
            {"memory_mb", s.memory_mb},
            {"disk_mb", s.disk_mb},
            {"pids", s.pids},
            {"open_files", s.open_files},
            {"network", {{"mode", s.network.mode}, {"allow", s.network.allow}}},
            {"filesystem", ToJson(s.filesystem)},
            {"env", s.env},
            {"ttl_s", s.ttl_s},
            {"idle_timeout_s", s.idle_timeout_s ? json(*s.idle_timeout_s) : json(nullptr)},
            {"labels", s.labels},
            {"node_selector", s.node_selector},
            {"trajectory", s.trajectory ? json(*s.trajectory) : json(nullptr)},
            {"on_divergence", s.on_divergence},
            {"lease", s.lease ? json(*s.lease) : json(nullptr)},
            {"on_lease_expiry", s.on_lease_expiry},
            {"display", s.display ? json{{"width", s.display->width}, {"height", s.display->height}}
                                  : json(nullptr)}};
  return j;
}

Result<ExecRequest> ParseExecRequest(const json& j) {
  WARREN_RETURN_IF_ERROR(
      CheckFields(j,
                  {"argv", "cmd", "stdin", "stdin_b64", "env", "cwd", "timeout_s", "wait",
                   "max_output_bytes", "binary", "step", "tty", "rows", "cols", "stdin_open"},
                  "exec request"));
  ExecRequest r;
  bool has_argv = j.contains("argv") && !j["argv"].is_null();
  bool has_cmd = j.contains("cmd") && !j["cmd"].is_null();
  if (has_argv == has_cmd) return Invalid("give exactly one of `argv` (array) or `cmd` (string)");
  size_t total = 0;
  if (has_argv) {
    if (!j["argv"].is_array() || j["argv"].empty())
      return Invalid("`argv` must be a non-empty array of strings");
    for (const auto& a : j["argv"]) {
      if (!a.is_string()) return Invalid("`argv` must contain only strings");
      std::string s = a.get<std::string>();
      if (s.find('\0') != std::string::npos) return Invalid("`argv` entries must not contain NUL");
      total += s.size() + 1;
      r.argv.push_back(std::move(s));
    }
    if (r.argv[0].empty()) return Invalid("`argv[0]` must not be empty");
  } else {
    if (!j["cmd"].is_string()) return Invalid("`cmd` must be a string");
    std::string cmd = j["cmd"].get<std::string>();
    if (cmd.find('\0') != std::string::npos) return Invalid("`cmd` must not contain NUL");
    total = cmd.size();
    r.argv = {"/bin/sh", "-c", cmd};
  }
  bool has_stdin = j.contains("stdin") && !j["stdin"].is_null();
  bool has_b64 = j.contains("stdin_b64") && !j["stdin_b64"].is_null();
  if (has_stdin && has_b64) return Invalid("give at most one of `stdin` and `stdin_b64`");
  if (has_stdin) {
    if (!j["stdin"].is_string()) return Invalid("`stdin` must be a string");
    r.stdin_data = j["stdin"].get<std::string>();
  } else if (has_b64) {
    if (!j["stdin_b64"].is_string()) return Invalid("`stdin_b64` must be a base64 string");
    std::string raw;
    if (!Base64Decode(j["stdin_b64"].get<std::string>(), &raw))
      return Invalid("`stdin_b64` is not valid base64");
    r.stdin_data = std::move(raw);
  }
  WARREN_RETURN_IF_ERROR(GetStringMap(j, "env", &r.env, 1024, true));
  for (const auto& [k, v] : r.env) total += k.size() + v.size() + 2;
  if (total > Limits::kMaxArgvBytes) return Invalid("command line and environment exceed 1 MiB");
  WARREN_RETURN_IF_ERROR(GetString(j, "cwd", &r.cwd));
  if (r.cwd.empty()) r.cwd = "/";
  if (r.cwd[0] != '/') return Invalid("`cwd` must be an absolute path");
  WARREN_RETURN_IF_ERROR(GetDouble(j, "timeout_s", &r.timeout_s, 0.001, Limits::kMaxTimeoutS));
  WARREN_RETURN_IF_ERROR(GetBool(j, "wait", &r.wait));
  WARREN_RETURN_IF_ERROR(
      GetUint(j, "max_output_bytes", &r.max_output_bytes, 0, Limits::kMaxOutputBytes));
  WARREN_RETURN_IF_ERROR(GetBool(j, "binary", &r.binary));
  if (j.contains("step") && !j["step"].is_null()) {
    uint64_t step = 0;
    WARREN_RETURN_IF_ERROR(GetUint(j, "step", &step, 0, UINT32_MAX));
    r.step = step;
  }
  bool tty = false;
  WARREN_RETURN_IF_ERROR(GetBool(j, "tty", &tty));
  WARREN_RETURN_IF_ERROR(GetBool(j, "stdin_open", &r.stdin_open));
  const bool sized =
      (j.contains("rows") && !j["rows"].is_null()) || (j.contains("cols") && !j["cols"].is_null());
  if (sized && !tty) return Invalid("`rows` and `cols` size a terminal: they need `tty: true`");
  if (tty) {
    uint64_t rows = 24, cols = 80;
    WARREN_RETURN_IF_ERROR(GetUint(j, "rows", &rows, 1, node::TerminalSize::kMax));
    WARREN_RETURN_IF_ERROR(GetUint(j, "cols", &cols, 1, node::TerminalSize::kMax));
    r.tty = node::TerminalSize{static_cast<uint16_t>(rows), static_cast<uint16_t>(cols)};
  }
  if (tty || r.stdin_open) {
    auto given = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
    if (!given("wait")) r.wait = false;
    if (!given("timeout_s")) r.timeout_s = 0;  // none: the sandbox's own lifetime bounds it
    if (!given("max_output_bytes")) r.max_output_bytes = Limits::kMaxOutputBytes;
  }
  return r;
}

Result<ExecInput> ParseExecInput(const json& j) {
  WARREN_RETURN_IF_ERROR(CheckFields(j, {"data", "data_b64", "eof"}, "input request"));
  ExecInput in;
  const bool text = j.contains("data") && !j["data"].is_null();
  const bool b64 = j.contains("data_b64") && !j["data_b64"].is_null();
  if (text && b64) return Invalid("give at most one of `data` and `data_b64`");
  if (text) {
    if (!j["data"].is_string()) return Invalid("`data` must be a string");
    in.data = j["data"].get<std::string>();
  } else if (b64) {
    if (!j["data_b64"].is_string() || !Base64Decode(j["data_b64"].get<std::string>(), &in.data))
      return Invalid("`data_b64` must be base64");
  }
  WARREN_RETURN_IF_ERROR(GetBool(j, "eof", &in.eof));
  if (!text && !b64 && !in.eof)
    return Invalid("an input request gives `data`, `data_b64` or `eof`");
  if (in.data.size() > Limits::kMaxInputBytes)
    return Invalid("input larger than " + std::to_string(Limits::kMaxInputBytes) +
                   " bytes: send it in pieces");
  return in;
}

}  // namespace warren::server
