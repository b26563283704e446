#include "server/e2b/envd_messages.h"

#include <csignal>
#include <ctime>

#include "base/ids.h"
#include "base/utf8.h"

namespace warren::server::e2b {

using nlohmann::json;

namespace {

// proto3 JSON: an absent or null field is its default.
const json* Field(const json& j, const char* name) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::string> StringField(const json& j, const char* name) {
  const json* f = Field(j, name);
  if (!f) return std::string();
  if (!f->is_string()) return Invalid(std::string("`") + name + "` must be a string");
  return f->get<std::string>();
}

// uint32 fields come as numbers (or, proto3 JSON allows, numeric strings).
Result<uint32_t> Uint32Field(const json& j, const char* name) {
  const json* f = Field(j, name);
  if (!f) return 0u;
  if (f->is_number_unsigned()) {
    auto v = f->get<uint64_t>();
    if (v <= UINT32_MAX) return static_cast<uint32_t>(v);
  } else if (f->is_string()) {
    const std::string& s = f->get_ref<const std::string&>();
    char* end = nullptr;
    unsigned long long v = strtoull(s.c_str(), &end, 10);
    if (!s.empty() && *end == 0 && v <= UINT32_MAX) return static_cast<uint32_t>(v);
  }
  return Invalid(std::string("`") + name + "` must be an unsigned 32-bit integer");
}

Result<std::optional<node::TerminalSize>> PtyField(const json& j) {
  const json* pty = Field(j, "pty");
  if (!pty) return std::optional<node::TerminalSize>();
  const json* size = Field(*pty, "size");
  node::TerminalSize ts;
  if (size) {
    uint32_t cols = WARREN_TRY(Uint32Field(*size, "cols"));
    uint32_t rows = WARREN_TRY(Uint32Field(*size, "rows"));
    if (cols == 0 || rows == 0 || cols > node::TerminalSize::kMax ||
        rows > node::TerminalSize::kMax)
      return Invalid("a terminal's `cols` and `rows` must be 1 to " +
                     std::to_string(node::TerminalSize::kMax));
    ts.cols = static_cast<uint16_t>(cols);
    ts.rows = static_cast<uint16_t>(rows);
  }
  return std::optional<node::TerminalSize>(ts);
}

std::string Bytes(const json& j, const char* name, bool* present, bool* bad) {
  const json* f = Field(j, name);
  *present = f != nullptr;
  if (!f) return "";
  std::string out;
  if (!f->is_string() || !Base64Decode(f->get_ref<const std::string&>(), &out)) *bad = true;
  return out;
}

}  // namespace

Result<StartRequest> ParseStartRequest(const json& j) {
  StartRequest r;
  const json* p = Field(j, "process");
  if (!p || !p->is_object()) return Invalid("`process` is required");
  r.process.cmd = WARREN_TRY(StringField(*p, "cmd"));
  if (r.process.cmd.empty()) return Invalid("`process.cmd` is required");
  if (const json* args = Field(*p, "args")) {
    if (!args->is_array()) return Invalid("`process.args` must be a list of strings");
    for (const auto& a : *args) {
      if (!a.is_string()) return Invalid("`process.args` must be a list of strings");
      r.process.args.push_back(a.get<std::string>());
    }
  }
  if (const json* envs = Field(*p, "envs")) {
    if (!envs->is_object()) return Invalid("`process.envs` must map names to strings");
    for (const auto& [k, v] : envs->items()) {
      if (!v.is_string()) return Invalid("`process.envs` must map names to strings");
      r.process.envs[k] = v.get<std::string>();
    }
  }
  if (const json* cwd = Field(*p, "cwd")) {
    if (!cwd->is_string()) return Invalid("`process.cwd` must be a string");
    r.process.cwd = cwd->get<std::string>();
  }
  r.pty = WARREN_TRY(PtyField(j));
  if (const json* tag = Field(j, "tag")) {
    if (!tag->is_string()) return Invalid("`tag` must be a string");
    r.tag = tag->get<std::string>();
  }
  if (const json* in = Field(j, "stdin")) {
    if (!in->is_boolean()) return Invalid("`stdin` must be a boolean");
    r.stdin = in->get<bool>();
  }
  return r;
}

Result<ProcessSelector> ParseSelector(const json& request) {
  const json* p = Field(request, "process");
  if (!p || !p->is_object()) return Invalid("`process` (a pid or a tag) is required");
  ProcessSelector s;
  if (const json* tag = Field(*p, "tag")) {
    if (!tag->is_string()) return Invalid("`process.tag` must be a string");
    s.tag = tag->get<std::string>();
    return s;
  }
  s.pid = WARREN_TRY(Uint32Field(*p, "pid"));
  if (s.pid == 0) return Invalid("`process` (a pid or a tag) is required");
  return s;
}

Result<InputRequest> ParseSendInput(const json& j) {
  InputRequest r;
  r.process = WARREN_TRY(ParseSelector(j));
  const json* in = Field(j, "input");
  if (!in) return Invalid("`input` is required");
  bool present = false, bad = false;
  r.data = Bytes(*in, "stdin", &present, &bad);
  if (!present) r.data = Bytes(*in, "pty", &present, &bad);
  if (bad) return Invalid("`input` bytes must be base64");
  return r;
}

Result<SignalRequest> ParseSendSignal(const json& j) {
  SignalRequest r;
  r.process = WARREN_TRY(ParseSelector(j));
  const json* sig = Field(j, "signal");
  if (sig && sig->is_string()) {
    const std::string& name = sig->get_ref<const std::string&>();
    if (name == "SIGNAL_SIGKILL") r.signal = SIGKILL;
    if (name == "SIGNAL_SIGTERM") r.signal = SIGTERM;
  } else if (sig && sig->is_number_integer()) {
    int v = sig->get<int>();
    if (v == SIGKILL || v == SIGTERM) r.signal = v;
  }
  if (r.signal == 0) return Invalid("`signal` must be SIGNAL_SIGTERM or SIGNAL_SIGKILL");
  return r;
}

Result<UpdateRequest> ParseUpdate(const json& j) {
  UpdateRequest r;
  r.process = WARREN_TRY(ParseSelector(j));
  r.pty = WARREN_TRY(PtyField(j));
  return r;
}

json ToJson(const ProcessInfo& p) {
  json config = {{"cmd", p.config.cmd}, {"args", p.config.args}};
  if (!p.config.envs.empty()) config["envs"] = p.config.envs;
  if (p.config.cwd) config["cwd"] = *p.config.cwd;
  json out = {{"config", config}, {"pid", p.pid}};
  if (p.tag) out["tag"] = *p.tag;
  return out;
}

json StartEvent(uint32_t pid) { return {{"start", {{"pid", pid}}}}; }

json DataEvent(int stream, std::string_view bytes, bool pty) {
  const char* name = pty ? "pty" : stream == 2 ? "stderr" : "stdout";
  return {{"data", {{name, Base64Encode(bytes)}}}};
}

json KeepaliveEvent() { return {{"keepalive", json::object()}}; }

json EndEvent(const node::ExecOutcome& o) {
  json end = json::object();
  if (!o.signal.empty() || o.timed_out || o.exit_code < 0) {
    // Go's ProcessState.String() for a signalled process; a deadline kills with SIGKILL.
    std::string sig = o.signal.empty() ? "KILL" : o.signal;
    if (sig.rfind("SIG", 0) == 0) sig = sig.substr(3);
    static const std::map<std::string, std::string> kNames = {{"KILL", "killed"},
                                                              {"TERM", "terminated"},
                                                              {"INT", "interrupt"},
                                                              {"HUP", "hangup"},
                                                              {"QUIT", "quit"},
                                                              {"SEGV", "segmentation fault"},
                                                              {"ABRT", "aborted"},
                                                              {"PIPE", "broken pipe"},
                                                              {"USR1", "user defined signal 1"},
                                                              {"USR2", "user defined signal 2"},
                                                              {"ALRM", "alarm clock"},
                                                              {"BUS", "bus error"}};
    auto it = kNames.find(sig);
    std::string status = "signal: " + (it == kNames.end() ? sig : it->second);
    end["exitCode"] = -1;
    end["status"] = status;
    end["error"] = o.error.empty() ? status : o.error;
    return {{"end", end}};
  }
  std::string status = "exit status " + std::to_string(o.exit_code);
  if (o.exit_code != 0) end["exitCode"] = o.exit_code;
  end["exited"] = true;
  end["status"] = status;
  if (o.exit_code != 0) end["error"] = status;
  return {{"end", end}};
}

json ToJson(const EntryInfo& e) {
  static const char* kTypes[] = {"FILE_TYPE_UNSPECIFIED", "FILE_TYPE_FILE", "FILE_TYPE_DIRECTORY",
                                 "FILE_TYPE_SYMLINK"};
  json j = {{"name", e.name},
            {"type", kTypes[static_cast<int>(e.type)]},
            {"path", e.path},
            {"size", std::to_string(e.size)},
            {"mode", e.mode},
            {"permissions", e.permissions},
            {"owner", e.owner},
            {"group", e.group},
            {"modifiedTime", Rfc3339(e.modified)}};
  if (e.symlink_target) j["symlinkTarget"] = *e.symlink_target;
  return j;
}

json FilesystemEvent(const std::string& name, FsEventType type) {
  static const char* kTypes[] = {"EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE",
                                 "EVENT_TYPE_REMOVE",      "EVENT_TYPE_RENAME", "EVENT_TYPE_CHMOD"};
  return {{"filesystem", {{"name", name}, {"type", kTypes[static_cast<int>(type)]}}}};
}

Result<std::string> PathField(const json& j, const char* field) {
  std::string p = WARREN_TRY(StringField(j, field));
  if (p.empty()) return Invalid(std::string("`") + field + "` is required");
  if (p.size() > 4096 || p.find('\0') != std::string::npos) return Invalid("bad path", p);
  return p;
}

}  // namespace warren::server::e2b
