#include "node/agent_conn.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <set>

#include "agent/desktop_messages.h"
#include "agent/fs_helper.h"

namespace warren::node {
namespace {

// Finished exec records kept per sandbox for GET .../execs/ID and stream resumption: at most
// this many, holding at most this much output, oldest dropped first.
constexpr size_t kKeepExecs = 1024;
constexpr uint64_t kKeepBytes = 64ull << 20;
// Commands running at once in one sandbox: each holds pipes and output buffers on the host.
constexpr size_t kMaxRunningExecs = 64;
// All output one sandbox's exec records may hold on the host at once.
constexpr uint64_t kSandboxOutputBudget = 256ull << 20;
constexpr int kFileOpTimeoutMs = 120000;

}  // namespace

AgentConn::AgentConn(std::string sandbox_id, UniqueFd sock)
    : sandbox_id_(std::move(sandbox_id)),
      sock_(std::move(sock)),
      budget_(std::make_shared<OutputBudget>(kSandboxOutputBudget)) {
  // A frozen or wedged agent must not hang a request thread forever.
  timeval tv{10, 0};
  setsockopt(sock_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

AgentConn::~AgentConn() { OnClosed("sandbox deleted"); }

bool AgentConn::closed() const {
  MutexLock lock(&mu_);
  return closed_;
}

Status AgentConn::Send(const agent::Message& m) {
  std::lock_guard lock(send_mu_);
  Status st = agent::Send(sock_.get(), m);
  if (!st.ok() && st.err() == EAGAIN)
    return Status(Code::kUnavailable, "send to agent", sandbox_id_, "agent not responding");
  return st;
}

void AgentConn::OnMessage(agent::Message& m) {
  const std::string t = m.header.value("t", "");
  const std::string id = m.header.value("id", "");
  if (t == "out" || t == "exit" || t == "exec_failed") {
    std::shared_ptr<ExecRecord> rec = FindExec(id);
    if (!rec) return;
    if (t == "out") {
      int stream = m.header.value("s", "") == "stderr" ? 2 : 1;
      std::function<void(int, std::string_view)> channel;
      {
        MutexLock lock(&mu_);
        auto it = channels_.find(id);
        if (it != channels_.end()) channel = it->second;
      }
      if (channel)
        channel(stream, m.payload);
      else
        rec->AppendOutput(stream, m.payload);
    } else if (t == "exit") {
      ExecOutcome o;
      o.exit_code = m.header.value("exit_code", -1);
      if (m.header.contains("signal") && m.header["signal"].is_string())
        o.signal = m.header["signal"].get<std::string>();
      o.timed_out = m.header.value("timed_out", false);
      o.truncated[0] = m.header.value("stdout_truncated", false);
      o.truncated[1] = m.header.value("stderr_truncated", false);
      rec->Finish(o);
    } else {
      ExecOutcome o;
      o.error = m.header.value("error", "exec failed");
      o.not_started = true;
      rec->Finish(o);
    }
    return;
  }
  if (t == "resumed") {
    // Execs we think are running that the agent no longer knows: their end was lost.
    std::set<std::string> known;
    for (const auto& e : m.header.value("execs", nlohmann::json::array()))
      known.insert(e.value("id", ""));
    std::vector<std::shared_ptr<ExecRecord>> lost;
    {
      MutexLock lock(&mu_);
      // Only those we asked about: an exec started after the resume (the agent answers it
      // later, e.g. once a paused sandbox is thawed) is not lost.
      for (auto& [eid, rec] : execs_.records())
        if (!rec->done() && resume_asked_.count(eid) && !known.count(eid)) lost.push_back(rec);
      resume_asked_.clear();
    }
    ExecOutcome o;
    o.error = "the exec's end was lost while warren serve restarted";
    for (auto& rec : lost) rec->Finish(o);
    return;
  }
  std::shared_ptr<PendingOp> op;
  {
    MutexLock lock(&mu_);
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    op = it->second;
  }
  std::lock_guard l(op->mu);
  if (t == "data" && op->sink) {
    op->last_piece = std::chrono::steady_clock::now();
    if (op->sink_status.ok()) op->sink_status = op->sink(m.payload);
    if (m.header.value("last", false)) op->done = true;
  } else if (t == "data") {
    op->data += m.payload;
    if (m.header.value("last", false)) op->done = true;
  } else if (t == "ok") {
    op->done = true;
  } else if (t == "err") {
    int err = m.header.value("errno", 0);
    std::string msg = m.header.value("error", "agent error");
    Code code = ErrnoStatus("", "", err).code();
    if (err == EFBIG) code = Code::kInvalid;
    // An agent's own verdict (a policy it found invalid, a backend that cannot) wins.
    const std::string named = m.header.value("code", "");
    for (Code c : {Code::kInvalid, Code::kNotFound, Code::kConflict, Code::kQuota,
                   Code::kUnavailable, Code::kInternal})
      if (named == CodeName(c)) code = c;
    op->status = Status(code, "", "", msg);
    op->done = true;
  }
  if (op->done) op->cv.notify_all();
}

void AgentConn::OnClosed(const std::string& why) {
  std::map<std::string, std::shared_ptr<ExecRecord>> execs;
  std::map<std::string, std::shared_ptr<PendingOp>> ops;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    close_reason_ = why;
    execs = execs_.records();
    ops = ops_;
  }
  ExecOutcome o;
  o.error = "sandbox " + sandbox_id_ + " is gone: " + why;
  for (auto& [id, rec] : execs) rec->Finish(o);
  for (auto& [id, op] : ops) {
    std::lock_guard l(op->mu);
    if (!op->done) {
      op->done = true;
      op->status = Status(Code::kUnavailable, "agent", sandbox_id_, why);
      op->cv.notify_all();
    }
  }
}

Status AgentConn::StartExec(const std::shared_ptr<ExecRecord>& rec, const ExecSpec& spec) {
  {
    MutexLock lock(&mu_);
    if (closed_) return Status(Code::kConflict, "exec", sandbox_id_, "sandbox is not running");
    WARREN_RETURN_IF_ERROR(execs_.Admit(rec, kMaxRunningExecs, kKeepExecs, kKeepBytes));
    if (spec.channel && spec.on_output) channels_[rec->id()] = spec.on_output;
  }
  nlohmann::json env = spec.env;
  std::string_view in = spec.stdin_data;
  size_t first = std::min(in.size(), agent::kMaxPayload);
  // Input to come after `stdin_data`: the stdin stays open past its last piece.
  const bool open = spec.channel || spec.stdin_open || spec.tty;
  agent::Message m{{{"t", "exec"},
                    {"id", rec->id()},
                    {"argv", spec.argv},
                    {"env", env},
                    {"cwd", spec.cwd},
                    {"timeout_ms", spec.timeout_ms},
                    {"max_output", spec.max_output},
                    {"stdin", spec.has_stdin || open},
                    {"channel", spec.channel},
                    {"stdin_more", open || first < in.size()}},
                   std::string(in.substr(0, first))};
  if (!spec.env_defaults.empty()) m.header["env_defaults"] = spec.env_defaults;
  if (spec.tty) m.header["tty"] = {{"rows", spec.tty->rows}, {"cols", spec.tty->cols}};
  Status st = Send(m);
  for (size_t off = first; st.ok() && off < in.size(); off += agent::kMaxPayload) {
    size_t n = std::min(in.size() - off, agent::kMaxPayload);
    st = Send({{{"t", "stdin"}, {"id", rec->id()}, {"eof", !open && off + n >= in.size()}},
               std::string(in.substr(off, n))});
  }
  if (!st.ok()) {
    ExecOutcome o;
    o.error = st.ToString();
    rec->Finish(o);
  }
  return st;
}

Status AgentConn::SendStdin(const std::string& exec_id, std::string_view data, bool eof) {
  bool channel = false;
  {
    MutexLock lock(&mu_);
    channel = channels_.count(exec_id) > 0;
  }
  if (!channel) return WriteInput(exec_id, data, eof);
  // A channel's requests are the node's own: sent without waiting for the agent.
  // The agent's messages are bounded; large writes go in pieces, each sent whole (a
  // SEQPACKET send is atomic), under the send lock so pieces of two writers never interleave.
  std::lock_guard lock(stdin_mu_);
  size_t off = 0;
  do {
    size_t n = std::min(data.size() - off, agent::kMaxPayload);
    bool last = off + n >= data.size();
    WARREN_RETURN_IF_ERROR(Send({{{"t", "stdin"}, {"id", exec_id}, {"eof", eof && last}},
                                 std::string(data.substr(off, n))}));
    off += n;
  } while (off < data.size());
  return Status::Ok();
}

void AgentConn::AdoptExecs(std::vector<std::shared_ptr<ExecRecord>> recs) {
  MutexLock lock(&mu_);
  for (auto& r : recs) execs_.Adopt(std::move(r));
}

std::vector<ExecSpill::Loaded> AgentConn::CopyRunningExecs() {
  MutexLock lock(&mu_);
  std::vector<ExecSpill::Loaded> out;
  for (auto& [eid, rec] : execs_.records())
    if (!rec->done() && !channels_.count(eid)) out.push_back(rec->CopyForFork());
  return out;
}

Status AgentConn::SetGuestClock() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return Send({{{"t", "clock"}, {"now_ns", int64_t{now.tv_sec} * 1000000000 + now.tv_nsec}}, ""});
}

Status AgentConn::Resume() {
  nlohmann::json have = nlohmann::json::object();
  {
    MutexLock lock(&mu_);
    resume_asked_.clear();
    for (auto& [eid, rec] : execs_.records())
      if (!rec->done()) {
        auto [out, err] = rec->received();
        have[eid] = {out, err};
        resume_asked_.insert(eid);
      }
  }
  return Send({{{"t", "resume"}, {"execs", have}}, ""});
}

Status AgentConn::Signal(const std::string& exec_id, int sig) {
  if (!FindExec(exec_id)) return NotFound("exec", exec_id);
  return Send({{{"t", "signal"}, {"id", exec_id}, {"sig", sig}}, ""});
}

Status AgentConn::WriteInput(const std::string& exec_id, std::string_view data, bool eof) {
  // One writer at a time per connection, so that two clients' pieces never interleave; each
  // piece waits for the agent's word, which refuses input the command does not read.
  std::lock_guard lock(stdin_mu_);
  size_t off = 0;
  do {
    size_t n = std::min(data.size() - off, agent::kMaxPayload);
    bool last = off + n >= data.size();
    WARREN_RETURN_IF_ERROR(Request({{"t", "input"}, {"exec", exec_id}, {"eof", eof && last}},
                                   std::string(data.substr(off, n)))
                               .status());
    off += n;
  } while (off < data.size());
  return Status::Ok();
}

Status AgentConn::StartDisplay(DisplaySize size, bool device) {
  return Request(
             {{"t", "display"}, {"width", size.width}, {"height", size.height}, {"device", device}})
      .status()
      .Context("start the display");
}

Result<std::string> AgentConn::Screenshot() {
  auto png = Request({{"t", "screen"}});
  if (!png.ok()) return png.status().Context("take a screenshot");
  return png;
}

Status AgentConn::DesktopInput(const std::vector<InputStep>& steps) {
  return Request({{"t", "desktop_input"}, {"steps", agent::InputStepsToJson(steps)}})
      .status()
      .Context("send input");
}

Status AgentConn::Resize(const std::string& exec_id, TerminalSize size) {
  return Send({{{"t", "resize"}, {"id", exec_id}, {"rows", size.rows}, {"cols", size.cols}}, ""});
}

int AgentConn::Running() const {
  MutexLock lock(&mu_);
  return static_cast<int>(execs_.Running());
}

bool AgentConn::AnyExecAwaited() const {
  MutexLock lock(&mu_);
  for (auto& [eid, r] : execs_.records())
    if (r->awaited()) return true;
  return false;
}

std::vector<ExecSummary> AgentConn::ExecHistory() const {
  MutexLock lock(&mu_);
  return execs_.Summaries();
}

std::shared_ptr<ExecRecord> AgentConn::FindExec(const std::string& exec_id) {
  MutexLock lock(&mu_);
  return execs_.Find(exec_id);
}

// True once the agent answered (an early error stops an upload).
bool AgentConn::OpDone(PendingOp& op) {
  std::lock_guard l(op.mu);
  return op.done;
}

std::shared_ptr<AgentConn::PendingOp> AgentConn::NewOp(std::string* id) {
  MutexLock lock(&mu_);
  *id = "op-" + std::to_string(next_op_++);
  auto op = std::make_shared<PendingOp>();
  if (closed_) {
    op->done = true;
    op->status = Status(Code::kConflict, "file operation", sandbox_id_, "sandbox is not running");
  }
  ops_[*id] = op;
  return op;
}

Status AgentConn::WaitOp(const std::string& id, const std::shared_ptr<PendingOp>& op) {
  std::unique_lock l(op->mu);
  bool ok =
      op->cv.wait_for(l, std::chrono::milliseconds(kFileOpTimeoutMs), [&] { return op->done; });
  Status st =
      ok ? op->status : Status(Code::kUnavailable, "file operation", sandbox_id_, "timed out");
  l.unlock();
  MutexLock lock(&mu_);
  ops_.erase(id);
  return st;
}

Status AgentConn::WriteFile(const std::string& path, uint32_t mode, std::string_view data) {
  std::string id;
  auto op = NewOp(&id);
  size_t off = 0;
  Status st;
  do {
    size_t n = std::min(data.size() - off, agent::kMaxPayload);
    st = Send({{{"t", "put"},
                {"id", id},
                {"path", path},
                {"mode", mode},
                {"first", off == 0},
                {"last", off + n >= data.size()}},
               std::string(data.substr(off, n))});
    off += n;
  } while (st.ok() && off < data.size() && !OpDone(*op));
  if (!st.ok()) {
    MutexLock lock(&mu_);
    ops_.erase(id);
    return st;
  }
  return WaitOp(id, op).Context("write " + path);
}

Result<std::string> AgentConn::ReadFile(const std::string& path, uint64_t max) {
  auto r = Request({{"t", "get"}, {"path", path}, {"max", max}});
  if (!r.ok()) return r.status().Context("read " + path);
  return r;
}

Result<std::string> AgentConn::Request(nlohmann::json header, std::string payload) {
  std::string id;
  auto op = NewOp(&id);
  header["id"] = id;
  Status st = Send({std::move(header), std::move(payload)});
  if (!st.ok()) {
    MutexLock lock(&mu_);
    ops_.erase(id);
    return st;
  }
  WARREN_RETURN_IF_ERROR(WaitOp(id, op));
  return std::move(op->data);
}

Status AgentConn::SetFsPolicy(const isolation::FsPolicy& policy) {
  nlohmann::json h = agent::FsPolicyFields(policy);
  h["t"] = "fs_policy";
  return Request(std::move(h)).status();
}

Status AgentConn::StreamSnapshot(const std::function<Status(std::string_view)>& sink) {
  std::string id;
  auto op = NewOp(&id);
  {
    std::lock_guard l(op->mu);
    op->sink = sink;
  }
  Status st = Send({{{"t", "fs_snapshot"}, {"id", id}}, ""});
  if (st.ok()) {
    std::unique_lock l(op->mu);
    while (!op->done) {
      op->cv.wait_for(l, std::chrono::seconds(1));
      if (!op->done && std::chrono::steady_clock::now() - op->last_piece >
                           std::chrono::milliseconds(kFileOpTimeoutMs)) {
        st = Status(Code::kUnavailable, "snapshot", sandbox_id_, "the agent stopped sending");
        break;
      }
    }
    if (st.ok()) st = op->status.ok() ? op->sink_status : op->status;
    op->sink = nullptr;  // the reader thread must not call it once we return
  }
  MutexLock lock(&mu_);
  ops_.erase(id);
  return st;
}

Result<isolation::ChangeReport> AgentConn::ReadChanges(const std::string& under, size_t limit) {
  return agent::DecodeChangeReport(
      WARREN_TRY(Request({{"t", "fs_changes"}, {"under", under}, {"limit", limit}})));
}

}  // namespace warren::node
