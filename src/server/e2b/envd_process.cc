// envd's process.Process service over Warren's execs.
#include <algorithm>
#include <chrono>

#include "server/api_types.h"
#include "server/e2b/connect_protocol.h"
#include "server/e2b/e2b_service.h"
#include "server/e2b/envd_target.h"
#include "server/e2b/exec_feed.h"
#include "server/e2b/sandbox_file_writer.h"

namespace warren::server::e2b {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::optional<Clock::time_point> Deadline(const HttpRequest& r) {
  return CallDeadline(r.Header("connect-timeout-ms"));
}

std::chrono::milliseconds Keepalive(const HttpRequest& r) {
  return KeepaliveInterval(r.Header("keepalive-ping-interval"));
}

// An error of a process call: an ended (or never known) process is envd's not_found.
HttpReply ProcessError(const Status& st) {
  if (st.code() == Code::kConflict && st.ToString().find("ended") != std::string::npos)
    return UnaryError("not_found", st.ToString());
  return UnaryError(st);
}

}  // namespace

Result<E2bService::Target> E2bService::EnvdTarget(const HttpRequest& r) {
  const std::string id = r.Header("e2b-sandbox-id");
  auto sb = api_->FindSandbox(envd_, id);
  if (!sb.ok()) return sb.status();
  if (sb->state != SandboxState::kRunning)
    return Status(Code::kNotFound, "reach sandbox", id,
                  std::string("sandbox is ") + StateName(sb->state));
  return Target{id, std::move(*sb)};
}

HttpReply E2bService::Gone(const std::string& id) {
  return HttpReply::Json({{"code", 502}, {"message", "sandbox " + id + " is not running"}}, 502);
}

HttpReply E2bService::ProcessStart(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseStreamRequest(r.body);
  if (!msg.ok()) return StreamError(msg.status());
  auto req = ParseStartRequest(*msg);
  if (!req.ok()) return StreamError(req.status());
  const auto deadline = Deadline(r);
  // In the contract's shape, so that its checks apply (NUL bytes, variable names, 1 MiB of
  // command line and environment).
  json argv = json::array({req->process.cmd});
  for (const auto& a : req->process.args) argv.push_back(a);
  // The call's deadline is the command's (envd kills it then); without one it runs for as
  // long as the sandbox does.
  double timeout_s = Limits::kMaxTimeoutS;
  if (deadline)
    timeout_s = std::clamp(std::chrono::duration<double>(*deadline - Clock::now()).count(), 0.001,
                           Limits::kMaxTimeoutS);
  json spec = {{"argv", argv},
               {"env", req->process.envs},
               {"cwd", req->process.cwd ? ResolvePath(*req->process.cwd) : "/root"},
               {"timeout_s", timeout_s},
               {"wait", false},
               {"max_output_bytes", Limits::kMaxOutputBytes},
               {"binary", true},
               {"stdin_open", req->stdin && !req->pty},
               {"tty", req->pty.has_value()}};
  if (req->pty) {
    spec["rows"] = req->pty->rows;
    spec["cols"] = req->pty->cols;
  }
  auto parsed = ParseExecRequest(spec);
  if (!parsed.ok()) return StreamError(parsed.status());
  ExecRequest er = std::move(*parsed);
  // envd's: the user's home and name, unless the sandbox's environment says otherwise.
  er.env_defaults = {{"HOME", "/root"}, {"USER", "root"}, {"LOGNAME", "root"}};
  auto started = api_->StartExec(envd_, t.id, std::move(er));
  if (!started.ok()) return StreamError(started.status());
  const bool pty = req->pty.has_value();
  const uint32_t pid =
      processes_.Add(t.id, std::move(req->process), std::move(req->tag), pty, started->rec);
  return HttpReply::Feed(
      std::make_shared<ExecFeed>(started->rec, pid, pty, 0, Keepalive(r), deadline));
}

HttpReply E2bService::ProcessConnect(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseStreamRequest(r.body);
  if (!msg.ok()) return StreamError(msg.status());
  auto sel = ParseSelector(*msg);
  if (!sel.ok()) return StreamError(sel.status());
  auto proc = processes_.Find(t.id, sel->pid, sel->tag);
  if (!proc) return StreamError("not_found", "no running process with that pid or tag");
  // From now on, as envd: what the command wrote while no one listened is not replayed.
  return HttpReply::Feed(std::make_shared<ExecFeed>(
      proc->rec, proc->pid, proc->pty, proc->rec->last_seq(), Keepalive(r), Deadline(r)));
}

HttpReply E2bService::ProcessList(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  json out = json::array();
  for (const auto& p : processes_.Running(t.id))
    out.push_back(ToJson(ProcessInfo{p.config, p.pid, p.tag}));
  return UnaryOk({{"processes", out}});
}

HttpReply E2bService::ProcessSendInput(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto in = ParseSendInput(*msg);
  if (!in.ok()) return UnaryError(in.status());
  auto proc = processes_.Find(t.id, in->process.pid, in->process.tag);
  if (!proc) return UnaryError("not_found", "no running process with that pid or tag");
  // Up to 5 s without progress, rather than failing after part of it went.
  Status st = SendInputInPieces(api_, envd_, t.id, *proc->rec, in->data, 2500);
  return st.ok() ? UnaryOk(json::object()) : ProcessError(st);
}

HttpReply E2bService::ProcessCloseStdin(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto sel = ParseSelector(*msg);
  if (!sel.ok()) return UnaryError(sel.status());
  auto proc = processes_.Find(t.id, sel->pid, sel->tag);
  if (!proc) return UnaryError("not_found", "no running process with that pid or tag");
  ExecInput input;
  input.eof = true;
  Status st = api_->WriteExecInput(envd_, t.id, proc->rec->id(), input);
  return st.ok() ? UnaryOk(json::object()) : ProcessError(st);
}

HttpReply E2bService::ProcessSendSignal(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto sig = ParseSendSignal(*msg);
  if (!sig.ok()) return UnaryError(sig.status());
  auto proc = processes_.Find(t.id, sig->process.pid, sig->process.tag);
  if (!proc) return UnaryError("not_found", "no running process with that pid or tag");
  Status st = api_->SignalExec(envd_, t.id, proc->rec->id(), sig->signal);
  return st.ok() ? UnaryOk(json::object()) : ProcessError(st);
}

HttpReply E2bService::ProcessUpdate(HttpRequest& r) {
  WARREN_E2B_TARGET(t, r);
  auto msg = ParseUnaryRequest(r.body);
  if (!msg.ok()) return UnaryError(msg.status());
  auto up = ParseUpdate(*msg);
  if (!up.ok()) return UnaryError(up.status());
  auto proc = processes_.Find(t.id, up->process.pid, up->process.tag);
  if (!proc) return UnaryError("not_found", "no running process with that pid or tag");
  if (!up->pty) return UnaryOk(json::object());  // nothing to change
  if (!proc->pty) return UnaryError("failed_precondition", "the process has no terminal");
  Status st = api_->ResizeExec(envd_, t.id, proc->rec->id(), *up->pty);
  return st.ok() ? UnaryOk(json::object()) : ProcessError(st);
}

}  // namespace warren::server::e2b
