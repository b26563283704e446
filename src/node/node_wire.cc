#include "node/node_wire.h"

#include "base/json_fields.h"
#include "base/sha256.h"
#include "base/utf8.h"

namespace warren::node {

using nlohmann::json;

json ToWire(const net::Policy& policy) {
  return {{"mode", policy.egress ? "egress" : "none"}, {"allow", policy.Texts()}};
}

Result<net::Policy> ParseWirePolicy(const json& j) {
  JsonFields f(j, "network policy");
  WARREN_RETURN_IF_ERROR(f.Object());
  std::string mode;
  std::vector<std::string> allow;
  WARREN_RETURN_IF_ERROR(f.String("mode", &mode));
  WARREN_RETURN_IF_ERROR(f.Strings("allow", &allow, true));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return net::ParsePolicy(mode, allow);
}

json ToWire(const isolation::FsPolicy& policy) {
  return {{"read_only", policy.read_only}, {"writable", policy.writable}};
}

Result<isolation::FsPolicy> ParseWireFsPolicy(const json& j) {
  JsonFields f(j, "filesystem policy");
  WARREN_RETURN_IF_ERROR(f.Object());
  isolation::FsPolicy p;
  WARREN_RETURN_IF_ERROR(f.Strings("read_only", &p.read_only, true));
  WARREN_RETURN_IF_ERROR(f.Strings("writable", &p.writable, true));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return isolation::NormalizeFsPolicy(std::move(p));
}

json ToWire(const NodeSandboxSpec& spec) {
  const runtime::SandboxConfig& c = spec.config;
  json layers = json::array();
  for (const auto& l : c.layers) layers.push_back({{"digest", l.digest}, {"tool", l.tool}});
  return {{"backend", runtime::BackendName(spec.backend)},
          {"id", c.id},
          {"hostname", c.hostname},
          {"layers", layers},
          {"memory_bytes", c.memory_bytes},
          {"disk_bytes", c.disk_bytes},
          {"pids", c.pids},
          {"cpus", c.cpus},
          {"open_files", c.open_files},
          {"env", c.env},
          {"display", c.display ? json{{"width", c.display->width}, {"height", c.display->height}}
                                : json(nullptr)},
          {"network", ToWire(spec.network)},
          {"fork", spec.fork}};
}

Result<NodeSandboxSpec> ParseWireSandboxSpec(const json& j) {
  JsonFields f(j, "sandbox spec");
  WARREN_RETURN_IF_ERROR(f.Object());
  NodeSandboxSpec s;
  runtime::SandboxConfig& c = s.config;
  std::string backend;
  WARREN_RETURN_IF_ERROR(f.String("backend", &backend));
  auto kind = runtime::ParseBackendKind(backend);
  if (!kind) return Invalid("sandbox spec: unknown backend `" + backend + "`");
  s.backend = *kind;
  WARREN_RETURN_IF_ERROR(f.String("id", &c.id));
  if (c.id.empty()) return Invalid("sandbox spec: `id` is empty");
  WARREN_RETURN_IF_ERROR(f.String("hostname", &c.hostname));
  const json* layers = nullptr;
  WARREN_RETURN_IF_ERROR(f.Value("layers", &layers));
  if (!layers->is_array() || layers->empty())
    return Invalid("sandbox spec: `layers` must be a non-empty array");
  for (const json& l : *layers) {
    JsonFields lf(l, "sandbox spec layer");
    WARREN_RETURN_IF_ERROR(lf.Object());
    runtime::LayerRef ref;
    WARREN_RETURN_IF_ERROR(lf.String("digest", &ref.digest));
    WARREN_RETURN_IF_ERROR(lf.Bool("tool", &ref.tool, true));
    WARREN_RETURN_IF_ERROR(lf.NoOthers());
    // Only a content digest: the node finds the blob itself.
    if (ref.digest.size() != 71 || ref.digest.rfind("sha256:", 0) != 0 ||
        ref.digest.find_first_not_of("0123456789abcdef", 7) != std::string::npos)
      return Invalid("sandbox spec: a layer is named by its sha256:HEX digest");
    c.layers.push_back(std::move(ref));
  }
  WARREN_RETURN_IF_ERROR(f.UInt("memory_bytes", &c.memory_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("disk_bytes", &c.disk_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("pids", &c.pids));
  WARREN_RETURN_IF_ERROR(f.Double("cpus", &c.cpus));
  WARREN_RETURN_IF_ERROR(f.UInt("open_files", &c.open_files));
  WARREN_RETURN_IF_ERROR(f.StringMap("env", &c.env, true));
  const json* display = nullptr;
  WARREN_RETURN_IF_ERROR(f.Value("display", &display, false));
  if (display && !display->is_null()) {
    JsonFields df(*display, "sandbox spec display");
    WARREN_RETURN_IF_ERROR(df.Object());
    uint64_t w = 0, h = 0;
    WARREN_RETURN_IF_ERROR(df.UInt("width", &w));
    WARREN_RETURN_IF_ERROR(df.UInt("height", &h));
    WARREN_RETURN_IF_ERROR(df.NoOthers());
    if (!agent::DisplaySize::Valid(w, h)) return Invalid("sandbox spec: display size out of range");
    c.display = agent::DisplaySize{static_cast<uint16_t>(w), static_cast<uint16_t>(h)};
  }
  const json* network = nullptr;
  WARREN_RETURN_IF_ERROR(f.Value("network", &network));
  s.network = WARREN_TRY(ParseWirePolicy(*network));
  WARREN_RETURN_IF_ERROR(f.String("fork", &s.fork, false));
  if (!s.fork.empty() && !IsForkToken(s.fork))
    return Invalid("sandbox spec: `fork` must be a fork's token (32 hex digits)");
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return s;
}

json ToWire(const ExecSpec& spec) {
  json j = {{"argv", spec.argv},
            {"env", spec.env},
            {"env_defaults", spec.env_defaults},
            {"cwd", spec.cwd},
            {"timeout_ms", spec.timeout_ms},
            {"max_output", spec.max_output},
            {"binary", spec.binary}};
  if (spec.has_stdin) j["stdin_b64"] = Base64Encode(spec.stdin_data);
  if (spec.stdin_open) j["stdin_open"] = true;
  if (spec.tty) j["tty"] = {{"rows", spec.tty->rows}, {"cols", spec.tty->cols}};
  return j;
}

Result<TerminalSize> ParseWireTerminalSize(const json& j) {
  JsonFields f(j, "terminal size");
  WARREN_RETURN_IF_ERROR(f.Object());
  uint64_t rows = 0, cols = 0;
  WARREN_RETURN_IF_ERROR(f.UInt("rows", &rows));
  WARREN_RETURN_IF_ERROR(f.UInt("cols", &cols));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  if (rows < 1 || rows > TerminalSize::kMax || cols < 1 || cols > TerminalSize::kMax)
    return Invalid("terminal size: `rows` and `cols` are 1 to " +
                   std::to_string(TerminalSize::kMax));
  return TerminalSize{static_cast<uint16_t>(rows), static_cast<uint16_t>(cols)};
}

json ToWire(const std::vector<ExecSummary>& execs) {
  json list = json::array();
  for (const ExecSummary& e : execs) {
    json j = {{"exec_id", e.exec_id},           {"argv", e.argv},
              {"started_unix", e.started_unix}, {"running", e.running},
              {"timed_out", e.timed_out},       {"duration_ms", e.duration_ms},
              {"output_bytes", e.output_bytes}};
    if (e.exit_code) j["exit_code"] = *e.exit_code;
    if (!e.signal.empty()) j["signal"] = e.signal;
    list.push_back(std::move(j));
  }
  return {{"execs", std::move(list)}};
}

Result<std::vector<ExecSummary>> ParseWireExecHistory(const json& j) {
  JsonFields f(j, "exec history");
  WARREN_RETURN_IF_ERROR(f.Object());
  const json* list = nullptr;
  WARREN_RETURN_IF_ERROR(f.Value("execs", &list));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  if (!list->is_array()) return Invalid("exec history: `execs` must be an array");
  std::vector<ExecSummary> out;
  for (const json& item : *list) {
    JsonFields e(item, "exec summary");
    WARREN_RETURN_IF_ERROR(e.Object());
    ExecSummary s;
    int64_t exit_code = -1;
    uint64_t duration_ms = 0;
    WARREN_RETURN_IF_ERROR(e.String("exec_id", &s.exec_id));
    WARREN_RETURN_IF_ERROR(e.Strings("argv", &s.argv));
    WARREN_RETURN_IF_ERROR(e.Double("started_unix", &s.started_unix));
    WARREN_RETURN_IF_ERROR(e.Bool("running", &s.running, true));
    WARREN_RETURN_IF_ERROR(e.Bool("timed_out", &s.timed_out));
    WARREN_RETURN_IF_ERROR(e.UInt("duration_ms", &duration_ms));
    WARREN_RETURN_IF_ERROR(e.UInt("output_bytes", &s.output_bytes));
    WARREN_RETURN_IF_ERROR(e.Int("exit_code", &exit_code, false));
    WARREN_RETURN_IF_ERROR(e.String("signal", &s.signal, false));
    WARREN_RETURN_IF_ERROR(e.NoOthers());
    if (exit_code >= 0) s.exit_code = static_cast<int>(exit_code);
    s.duration_ms = static_cast<int64_t>(duration_ms);
    out.push_back(std::move(s));
  }
  return out;
}

Result<ExecSpec> ParseWireExecSpec(const json& j) {
  JsonFields f(j, "exec spec");
  WARREN_RETURN_IF_ERROR(f.Object());
  ExecSpec e;
  WARREN_RETURN_IF_ERROR(f.Strings("argv", &e.argv, true));
  if (e.argv.empty()) return Invalid("exec spec: `argv` is empty");
  WARREN_RETURN_IF_ERROR(f.StringMap("env", &e.env, true));
  WARREN_RETURN_IF_ERROR(f.StringMap("env_defaults", &e.env_defaults, true));
  WARREN_RETURN_IF_ERROR(f.String("cwd", &e.cwd));
  WARREN_RETURN_IF_ERROR(f.Int("timeout_ms", &e.timeout_ms));
  WARREN_RETURN_IF_ERROR(f.UInt("max_output", &e.max_output));
  WARREN_RETURN_IF_ERROR(f.Bool("binary", &e.binary, true));
  std::string stdin_b64;
  WARREN_RETURN_IF_ERROR(f.String("stdin_b64", &stdin_b64, false));
  if (j.contains("stdin_b64")) {
    if (!Base64Decode(stdin_b64, &e.stdin_data))
      return Invalid("exec spec: `stdin_b64` is not base64");
    e.has_stdin = true;
  }
  WARREN_RETURN_IF_ERROR(f.Bool("stdin_open", &e.stdin_open));
  const json* tty = nullptr;
  WARREN_RETURN_IF_ERROR(f.Value("tty", &tty, false));
  if (tty) e.tty = WARREN_TRY(ParseWireTerminalSize(*tty));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return e;
}

json ToWire(const SandboxRuntime& rt) {
  return {{"host_pid", rt.host_pid}, {"host_uid", rt.host_uid}};
}

Result<SandboxRuntime> ParseWireRuntime(const json& j) {
  JsonFields f(j, "sandbox runtime");
  WARREN_RETURN_IF_ERROR(f.Object());
  int64_t pid = 0, uid = 0;
  WARREN_RETURN_IF_ERROR(f.Int("host_pid", &pid));
  WARREN_RETURN_IF_ERROR(f.Int("host_uid", &uid));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  if (pid > INT32_MAX || uid > UINT32_MAX) return Invalid("sandbox runtime: out of range");
  return SandboxRuntime{static_cast<int>(pid), static_cast<uint32_t>(uid)};
}

json ToWire(const isolation::ChangeReport& report) {
  json changes = json::array();
  for (const auto& c : report.changes)
    changes.push_back({{"path_b64", Base64Encode(c.path)},
                       {"kind", isolation::ChangeKindName(c.kind)},
                       {"type", isolation::EntryTypeName(c.type)},
                       {"layer", c.layer},
                       {"size", c.size},
                       {"mode", c.mode}});
  return {{"changes", changes}, {"truncated", report.truncated}};
}

namespace {
template <typename E, typename NameOf>
Result<E> ByName(const std::string& name, std::initializer_list<E> all, NameOf name_of,
                 const char* what) {
  for (E e : all)
    if (name == name_of(e)) return e;
  return Invalid(std::string("change report: unknown ") + what + " `" + name + "`");
}
}  // namespace

namespace {
bool IsDigest(const std::string& d) {
  return d.rfind("sha256:", 0) == 0 && IsSha256Hex(std::string_view(d).substr(7));
}
}  // namespace

json ToWire(const SnapshotSpec& spec) {
  return {{"workspace", spec.workspace}, {"max_bytes", spec.max_bytes}};
}

Result<SnapshotSpec> ParseWireSnapshotSpec(const json& j) {
  JsonFields f(j, "snapshot");
  WARREN_RETURN_IF_ERROR(f.Object());
  SnapshotSpec spec;
  WARREN_RETURN_IF_ERROR(f.String("workspace", &spec.workspace));
  if (!spec.workspace.empty() && !IsDigest(spec.workspace))
    return Invalid("snapshot: `workspace` must be empty or sha256:<64 hex digits>");
  WARREN_RETURN_IF_ERROR(f.UInt("max_bytes", &spec.max_bytes));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return spec;
}

json ToWire(const SnapshotLayer& layer) {
  return {{"digest", layer.digest},
          {"size", layer.size},
          {"entries", layer.entries},
          {"file_bytes", layer.file_bytes},
          {"whiteouts", layer.whiteouts}};
}

Result<SnapshotLayer> ParseWireSnapshotLayer(const json& j) {
  JsonFields f(j, "snapshot layer");
  WARREN_RETURN_IF_ERROR(f.Object());
  SnapshotLayer l;
  WARREN_RETURN_IF_ERROR(f.String("digest", &l.digest));
  if (!IsDigest(l.digest))
    return Invalid("snapshot layer: `digest` must be sha256:<64 hex digits>");
  WARREN_RETURN_IF_ERROR(f.UInt("size", &l.size));
  WARREN_RETURN_IF_ERROR(f.UInt("entries", &l.entries));
  WARREN_RETURN_IF_ERROR(f.UInt("file_bytes", &l.file_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("whiteouts", &l.whiteouts));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return l;
}

json ToWire(const MemoryFork& fork) {
  return {{"token", fork.token},
          {"ram_bytes", fork.ram_bytes},
          {"paused_ms", fork.paused_ms},
          {"capture_ms", fork.capture_ms}};
}

Result<MemoryFork> ParseWireMemoryFork(const json& j) {
  JsonFields f(j, "memory fork");
  WARREN_RETURN_IF_ERROR(f.Object());
  MemoryFork m;
  WARREN_RETURN_IF_ERROR(f.String("token", &m.token));
  if (!IsForkToken(m.token)) return Invalid("memory fork: `token` must be 32 hex digits");
  WARREN_RETURN_IF_ERROR(f.UInt("ram_bytes", &m.ram_bytes));
  WARREN_RETURN_IF_ERROR(f.Int("paused_ms", &m.paused_ms));
  WARREN_RETURN_IF_ERROR(f.Int("capture_ms", &m.capture_ms));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return m;
}

bool IsForkToken(const std::string& s) {
  return s.size() == 32 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

Result<isolation::ChangeReport> ParseWireChanges(const json& j) {
  using isolation::ChangeKind;
  using isolation::EntryType;
  JsonFields f(j, "change report");
  WARREN_RETURN_IF_ERROR(f.Object());
  isolation::ChangeReport r;
  WARREN_RETURN_IF_ERROR(f.Bool("truncated", &r.truncated, true));
  const json* changes = nullptr;
  WARREN_RETURN_IF_ERROR(f.Value("changes", &changes));
  if (!changes->is_array()) return Invalid("change report: `changes` must be an array");
  for (const json& c : *changes) {
    JsonFields cf(c, "change");
    WARREN_RETURN_IF_ERROR(cf.Object());
    isolation::FsChange ch;
    std::string path_b64, kind, type;
    int64_t layer = -1, mode = 0;
    WARREN_RETURN_IF_ERROR(cf.String("path_b64", &path_b64));
    if (!Base64Decode(path_b64, &ch.path)) return Invalid("change: `path_b64` is not base64");
    WARREN_RETURN_IF_ERROR(cf.String("kind", &kind));
    ch.kind =
        WARREN_TRY(ByName(kind, {ChangeKind::kAdded, ChangeKind::kModified, ChangeKind::kDeleted},
                          isolation::ChangeKindName, "kind"));
    WARREN_RETURN_IF_ERROR(cf.String("type", &type));
    ch.type = WARREN_TRY(
        ByName(type, {EntryType::kFile, EntryType::kDir, EntryType::kSymlink, EntryType::kOther},
               isolation::EntryTypeName, "type"));
    WARREN_RETURN_IF_ERROR(cf.Int("layer", &layer, true, -1));
    WARREN_RETURN_IF_ERROR(cf.UInt("size", &ch.size));
    WARREN_RETURN_IF_ERROR(cf.Int("mode", &mode));
    if (mode > 0xffffffffLL) return Invalid("change: `mode` out of range");
    WARREN_RETURN_IF_ERROR(cf.NoOthers());
    ch.layer = static_cast<int>(layer);
    ch.mode = static_cast<uint32_t>(mode);
    r.changes.push_back(std::move(ch));
  }
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return r;
}

json ToWire(const Status& st) {
  return {{"error",
           {{"code", CodeName(st.code())},
            {"op", st.op()},
            {"object", SanitizeUtf8(st.object())},
            {"message", SanitizeUtf8(st.message())},
            {"errno", st.err()},
            {"retry_after_s", st.retry_after_s()}}}};
}

Status ParseWireStatus(const json& j, const std::string& what) {
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object())
    return Internal(what, "", "the node answered an error without an error body");
  JsonFields f(j["error"], "node error");
  std::string code, op, object, message;
  int64_t err = 0, retry = 0;
  // Only code and message when the node's front end answered (401, 404 of a path, 413).
  Status parsed = f.String("code", &code);
  if (parsed.ok()) parsed = f.String("op", &op, false);
  if (parsed.ok()) parsed = f.String("object", &object, false);
  if (parsed.ok()) parsed = f.String("message", &message);
  if (parsed.ok()) parsed = f.Int("errno", &err, false);
  if (parsed.ok()) parsed = f.Int("retry_after_s", &retry, false);
  if (!parsed.ok()) return parsed.Context(what);
  Code c = CodeFromName(code);
  if (c == Code::kOk) c = Code::kInternal;
  return Status(c, op, object, message, static_cast<int>(err))
      .WithRetryAfter(static_cast<int>(retry));
}

}  // namespace warren::node
