#include "cli/common.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include "base/size.h"
#include "base/utf8.h"

namespace warren::cli {

int& ExitCode() {
  static int code = 0;
  return code;
}

std::vector<std::string>& CommandAfterDashes() {
  static std::vector<std::string> cmd;
  return cmd;
}

int Fail(const Status& st) {
  fprintf(stderr, "warren: %s\n", st.ToString().c_str());
  return 1;
}

int Fail(const std::string& what, const std::string& why) {
  fprintf(stderr, "warren: %s: %s\n", what.c_str(), why.c_str());
  return 1;
}

std::string ServerUrl() {
  const char* u = getenv("WARREN_URL");
  return u && *u ? u : "http://127.0.0.1:7070";
}

static std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string Token() {
  if (const char* t = getenv("WARREN_TOKEN"); t && *t) return t;
  std::string home;
  if (const char* h = getenv("WARREN_HOME"); h && *h)
    home = h;
  else if (const char* u = getenv("HOME"); u && *u)
    home = std::string(u) + "/.config/warren";
  if (!home.empty()) {
    std::string t = ReadFirstLine(home + "/token");
    if (!t.empty()) return t;
  }
  return ReadFirstLine("/var/lib/warren/admin.token");
}

client::HttpClient& Client() {
  static client::HttpClient c(ServerUrl(), Token());
  return c;
}

CLI::Option* Repeatable(CLI::Option* opt) {
  // One value per occurrence: otherwise a vector option swallows the `--` and the command's
  // own dash arguments after it.
  return opt->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void AddSpecFlags(CLI::App* cmd, SpecFlags* f) {
  cmd->add_option("--backend", f->backend, "fncall|container|microvm|vm");
  cmd->add_option("--image", f->image, "base image NAME:TAG")->required();
  cmd->add_option("--workspace", f->workspace, "workspace layer NAME:TAG");
  Repeatable(cmd->add_option("--tool", f->tools, "tool layer NAME:TAG (repeatable)"));
  cmd->add_option("--cpu", f->cpu, "CPUs");
  cmd->add_option("--memory", f->memory, "memory limit, e.g. 512M");
  cmd->add_option("--disk", f->disk, "writable layer size, e.g. 1G");
  cmd->add_option("--pids", f->pids, "process limit");
  cmd->add_option("--network", f->network, "none|egress");
  Repeatable(cmd->add_option("--allow", f->allow, "egress rule (repeatable)"));
  Repeatable(cmd->add_option("--read-only", f->read_only,
                             "a tree the occupant cannot change, root included (repeatable)"));
  Repeatable(cmd->add_option("--writable", f->writable,
                             "a tree inside a read-only one that stays writable (repeatable)"));
  cmd->add_option("--ttl", f->ttl, "seconds until the sandbox is reaped");
  cmd->add_option("--display", f->display,
                  "WIDTHxHEIGHT: a screen (the image's Xvfb), for screenshots and input");
  Repeatable(cmd->add_option("--label", f->labels, "K=V (repeatable)"));
  Repeatable(cmd->add_option("--node-selector", f->node_selector,
                             "K=V a label the node must carry; warren.node=NAME picks a node "
                             "(repeatable)"));
  Repeatable(cmd->add_option("--env", f->env, "K=V (repeatable)"));
  cmd->add_option("--idle-timeout", f->idle_timeout,
                  "seconds without use until the sandbox is reaped");
  cmd->add_option("--lease", f->lease, "tie the sandbox to lease ID (POST /v1/leases)");
  cmd->add_option("--on-lease-expiry", f->on_lease_expiry, "delete|pause");
  cmd->add_option("--trajectory", f->trajectory, "record (and replay) execs as trajectory T");
}

static Status SplitKv(const std::vector<std::string>& in, const char* flag, nlohmann::json* out) {
  *out = nlohmann::json::object();
  for (const auto& kv : in) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Invalid(std::string(flag) + " takes K=V", kv);
    (*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return Status::Ok();
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

Result<uint64_t> SizeMb(const std::string& s, const char* flag) {
  auto b = ParseSize(s);
  // A bare number means MiB, as users of --memory 512 expect.
  if (b && s.find_first_not_of("0123456789") == std::string::npos) return *b;
  if (!b || *b < (1 << 20)) return Invalid(std::string(flag) + " needs a size like 512M or 1G", s);
  return *b >> 20;
}

Result<nlohmann::json> SpecJson(const SpecFlags& f) {
  nlohmann::json j = {{"backend", f.backend}, {"image", f.image}};
  if (!f.workspace.empty()) j["workspace"] = f.workspace;
  if (!f.tools.empty()) j["tools"] = f.tools;
  if (f.cpu > 0) j["cpu"] = f.cpu;
  if (!f.memory.empty()) j["memory_mb"] = WARREN_TRY(SizeMb(f.memory, "--memory"));
  if (!f.disk.empty()) j["disk_mb"] = WARREN_TRY(SizeMb(f.disk, "--disk"));
  if (f.pids) j["pids"] = f.pids;
  if (f.ttl) j["ttl_s"] = f.ttl;
  if (f.idle_timeout) j["idle_timeout_s"] = f.idle_timeout;
  if (!f.lease.empty()) j["lease"] = f.lease;
  if (!f.on_lease_expiry.empty()) j["on_lease_expiry"] = f.on_lease_expiry;
  if (!f.trajectory.empty()) j["trajectory"] = f.trajectory;
  if (!f.display.empty()) {
    unsigned w = 0, h = 0;
    char tail = 0;
    if (sscanf(f.display.c_str(), "%ux%u%c", &w, &h, &tail) != 2)
      return Invalid("--display is WIDTHxHEIGHT, e.g. 1280x800", f.display);
    j["display"] = {{"width", w}, {"height", h}};
  }
  std::string mode = f.allow.empty() ? f.network : "egress";
  j["network"] = {{"mode", mode}, {"allow", f.allow}};
  if (!f.read_only.empty() || !f.writable.empty())
    j["filesystem"] = {{"read_only", f.read_only}, {"writable", f.writable}};
  nlohmann::json labels, env, selector;
  WARREN_RETURN_IF_ERROR(SplitKv(f.labels, "--label", &labels));
  WARREN_RETURN_IF_ERROR(SplitKv(f.node_selector, "--node-selector", &selector));
  if (!selector.empty()) j["node_selector"] = selector;
  WARREN_RETURN_IF_ERROR(SplitKv(f.env, "--env", &env));
  if (!labels.empty()) j["labels"] = labels;
  if (!env.empty()) j["env"] = env;
  return j;
}

Result<std::string> CreateFromFlags(const SpecFlags& f) {
  nlohmann::json spec = WARREN_TRY(SpecJson(f));
  auto r = WARREN_TRY(Client().Request("POST", "/v1/sandboxes", spec.dump()));
  nlohmann::json sb = WARREN_TRY(client::JsonOf(r, "create sandbox"));
  return sb["id"].get<std::string>();
}

void AddExecFlags(CLI::App* cmd, ExecFlags* f) {
  cmd->add_option("--timeout", f->timeout, "seconds before the command is killed (exit 124)");
  cmd->add_option("--cwd", f->cwd, "working directory inside the sandbox");
  Repeatable(cmd->add_option("--env", f->env, "K=V (repeatable)"));
  cmd->add_flag("-i,--stdin", f->stdin_from_terminal, "send our standard input to the command");
  cmd->add_flag("-t,--tty", f->tty,
                "give the command a terminal (ours in raw mode; with -i, keys go as typed)");
  cmd->add_option("cmd", f->argv, "command and arguments (after --)");
}

static void WriteAll(FILE* f, const std::string& data) {
  fwrite(data.data(), 1, data.size(), f);
  fflush(f);
}

int ExecAndStream(const std::string& id, const ExecFlags& flags) {
  ExecFlags f = flags;
  const auto& tail = CommandAfterDashes();
  f.argv.insert(f.argv.end(), tail.begin(), tail.end());
  if (f.argv.empty()) return Fail("exec", "no command given (warren exec ID -- CMD [ARGS...])");
  nlohmann::json req = {{"argv", f.argv}, {"wait", false}, {"binary", true}};
  if (f.timeout > 0) req["timeout_s"] = f.timeout;
  if (!f.cwd.empty()) req["cwd"] = f.cwd;
  nlohmann::json env;
  if (Status st = SplitKv(f.env, "--env", &env); !st.ok()) return Fail(st);
  if (!env.empty()) req["env"] = env;
  if (f.tty) return ExecOnTerminal(id, f, std::move(req));
  if (f.stdin_from_terminal) {
    std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    req["stdin_b64"] = Base64Encode(in);
  }
  auto r = Client().Request("POST", "/v1/sandboxes/" + client::UrlEncode(id) + "/exec", req.dump());
  if (!r.ok()) return Fail(r.status());
  auto started = client::JsonOf(*r, "exec in " + id);
  if (!started.ok()) return Fail(started.status());
  auto result = StreamExecOutput(id, (*started).value("exec_id", ""));
  if (!result.ok()) return Fail(result.status());
  return ExitCodeOf(id, *result);
}

Result<nlohmann::json> StreamExecOutput(const std::string& id, const std::string& exec_id) {
  nlohmann::json result;
  uint64_t last_seq = 0;
  // Resume from the last sequence number if the stream breaks.
  for (int attempt = 0; attempt < 5 && result.is_null(); ++attempt) {
    Status st = Client().StreamLines(
        "/v1/sandboxes/" + client::UrlEncode(id) + "/execs/" + exec_id +
            "/stream?after=" + std::to_string(last_seq),
        [&](std::string_view line) {
          auto ev = nlohmann::json::parse(line, nullptr, false);
          if (ev.is_discarded() || !ev.is_object()) return;
          if (ev.contains("result")) {
            result = ev["result"];
            return;
          }
          if (ev.value("heartbeat", false) || !ev.contains("seq")) return;  // a quiet command
          last_seq = ev["seq"].get<uint64_t>();
          std::string data;
          if (!ev.contains("data_b64") || !Base64Decode(ev["data_b64"].get<std::string>(), &data))
            data = ev.value("data", "");
          WriteAll(ev.value("stream", "") == "stderr" ? stderr : stdout, data);
        });
    if (!st.ok() && st.code() != Code::kUnavailable) return st;
  }
  if (result.is_null()) return Status(Code::kUnavailable, "exec in", id, "lost the output stream");
  return result;
}

int ExitCodeOf(const std::string& id, const nlohmann::json& result) {
  if (result.contains("error") && result["exit_code"].is_null())
    return Fail("exec in " + id, result["error"].get<std::string>());
  if (result.value("timed_out", false)) return 124;
  return result["exit_code"].is_number() ? result["exit_code"].get<int>() : 1;
}

}  // namespace warren::cli
