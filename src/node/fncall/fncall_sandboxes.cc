#include "node/fncall/fncall_sandboxes.h"

#include <signal.h>

#include <algorithm>
#include <cmath>

#include "base/ids.h"
#include "node/fncall/judge.h"

namespace warren::fncall {
namespace {

constexpr size_t kMaxRunning = 64;  // execs running at once in one fncall sandbox
constexpr size_t kKeepExecs = 256;  // finished exec records kept per sandbox
constexpr int64_t kMaxWallMs = 3600 * 1000;

}  // namespace

Status FncallSandboxes::NoState(const std::string& op, const std::string& id) {
  return Status(Code::kConflict, op, id,
                "a fncall sandbox keeps nothing between execs (each runs in a fresh worker of its "
                "runner image): use a container sandbox for files, pause and signals");
}

FncallSandboxes::~FncallSandboxes() {
  std::vector<Worker> all;
  {
    MutexLock lock(&mu_);
    all.swap(workers_);
  }
  for (auto& w : all) w.thread.join();
}

std::shared_ptr<FncallSandboxes::Box> FncallSandboxes::Find(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = boxes_.find(id);
  return it == boxes_.end() ? nullptr : it->second;
}

bool FncallSandboxes::Has(const std::string& id) { return Find(id) != nullptr; }

size_t FncallSandboxes::size() {
  MutexLock lock(&mu_);
  return boxes_.size();
}

void FncallSandboxes::AddIds(std::set<std::string>* ids) {
  MutexLock lock(&mu_);
  for (const auto& [id, box] : boxes_) ids->insert(id);
}

Result<node::SandboxRuntime> FncallSandboxes::Create(const node::NodeSandboxSpec& spec) {
  if (spec.config.layers.size() != 1)
    return Invalid("a fncall sandbox runs in its runner image alone: no workspace or tools");
  if (spec.network.egress)
    return Invalid(
        "a fncall sandbox has no network (each call runs with loopback only); use a container "
        "sandbox");
  auto box = std::make_shared<Box>();
  for (const auto& l : spec.config.layers) box->layers.push_back(l.digest);
  box->config = spec.config;
  box->budget = std::make_shared<node::OutputBudget>(256ull << 20);
  if (!spill_dir_.empty()) {
    // A sandbox made again after a restart finds the records its execs left (a new one, an
    // empty journal). One that was running had its runner die with the daemon: it is ended.
    std::vector<node::ExecSpill::Loaded> loaded;
    box->journal = node::ExecJournal::Load(spill_dir_ + "/" + spec.config.id + ".journal", &loaded);
    for (auto& l : loaded) {
      auto rec = node::ExecRecord::Restore(std::move(l), spec.config.id, box->budget);
      if (!rec->done()) {
        node::ExecOutcome o;
        o.error = "warren serve restarted while this exec ran: its runner ended with it";
        rec->Finish(o);
      }
      box->execs.Adopt(std::move(rec));
    }
  }
  MutexLock lock(&mu_);
  if (boxes_.count(spec.config.id))
    return Status(Code::kConflict, "create sandbox", spec.config.id, "exists");
  boxes_[spec.config.id] = box;
  return node::SandboxRuntime{};
}

Status FncallSandboxes::SetNetwork(const std::string&, const net::Policy& policy) {
  if (policy.egress)
    return Invalid(
        "a fncall sandbox has no network (each call runs with loopback only); use a container "
        "sandbox");
  return Status::Ok();
}

Status FncallSandboxes::Delete(const std::string& id) {
  MutexLock lock(&mu_);
  if (auto it = boxes_.find(id); it != boxes_.end()) {
    if (it->second->journal) it->second->journal->Discard();
    boxes_.erase(it);
    return Status::Ok();  // running execs end at their own limits
  }
  return NotFound("sandbox", id);
}

int FncallSandboxes::RunningExecs(const std::string& id) {
  auto box = Find(id);
  if (!box) return 0;
  MutexLock lock(&mu_);
  return static_cast<int>(box->execs.Running());
}

Result<std::shared_ptr<node::ExecRecord>> FncallSandboxes::GetExec(const std::string& id,
                                                                   const std::string& exec_id) {
  auto box = Find(id);
  if (!box) return NotFound("sandbox", id);
  MutexLock lock(&mu_);
  auto rec = box->execs.Find(exec_id);
  if (!rec) return NotFound("exec", exec_id);
  return rec;
}

Result<std::vector<node::ExecSummary>> FncallSandboxes::ExecHistory(const std::string& id) {
  auto box = Find(id);
  if (!box) return NotFound("sandbox", id);
  MutexLock lock(&mu_);
  return box->execs.Summaries();
}

void FncallSandboxes::JoinFinished() {
  std::vector<Worker> done;
  {
    MutexLock lock(&mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        done.push_back(std::move(*it));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& w : done) w.thread.join();
}

Result<std::shared_ptr<node::ExecRecord>> FncallSandboxes::StartExec(const std::string& id,
                                                                     const std::string& exec_id,
                                                                     const node::ExecSpec& spec) {
  auto box = Find(id);
  if (!box) return NotFound("sandbox", id);
  // Each exec is a stateless call, its input given whole: nothing stays to type into.
  if (spec.tty || spec.stdin_open)
    return Invalid(
        "a fncall sandbox's exec takes no `tty` or `stdin_open`: its input is given "
        "whole (`stdin`); use a container, microvm or vm sandbox for a terminal",
        id);
  JoinFinished();
  auto rec =
      std::make_shared<node::ExecRecord>(exec_id, id, spec.max_output, spec.binary, box->budget);
  rec->SetCommand(spec.argv);
  if (box->journal) {
    auto spill = box->journal->Begin({{"id", exec_id},
                                      {"argv", spec.argv},
                                      {"binary", spec.binary},
                                      {"max_output", spec.max_output},
                                      {"started_unix", UnixNow()}});
    // Without its spill the exec still runs; it just would not survive a daemon restart.
    if (spill.ok()) rec->AttachSpill(std::move(*spill));
  }
  {
    MutexLock lock(&mu_);
    WARREN_RETURN_IF_ERROR(box->execs.Admit(rec, kMaxRunning, kKeepExecs, ~uint64_t{0}));
  }
  if (spec.on_record) spec.on_record(rec);

  RunRequest req;
  req.argv = spec.argv;
  req.env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
             {"HOME", "/tmp"},
             {"TMPDIR", "/tmp"},
             {"LANG", "C.UTF-8"}};
  for (const auto& [k, v] : box->config.env) req.env[k] = v;
  for (const auto& [k, v] : spec.env) req.env[k] = v;
  req.cwd = spec.cwd.empty() || spec.cwd == "/" ? "/tmp" : spec.cwd;
  req.stdin_data = spec.stdin_data;
  const int64_t wall = spec.timeout_ms > 0 ? std::min(spec.timeout_ms, kMaxWallMs) : kMaxWallMs;
  req.limits.wall_ms = wall;
  req.limits.cpu_s = (wall + 999) / 1000;
  req.limits.as_bytes = box->config.memory_bytes;
  req.limits.nproc = std::clamp<uint64_t>(box->config.pids, 16, 4096);
  req.limits.nofile = box->config.open_files;
  req.limits.fsize_bytes = box->config.disk_bytes;
  req.limits.max_output = spec.max_output;
  req.limits.kill_at_output_cap = false;  // an exec keeps running; its output is cut
  auto done = std::make_shared<std::atomic<bool>>(false);
  MutexLock lock(&mu_);
  workers_.push_back({std::thread([this, box, rec, req = std::move(req), done]() mutable {
                        Execute(box, rec, std::move(req));
                        done->store(true);
                      }),
                      done});
  return rec;
}

void FncallSandboxes::Execute(std::shared_ptr<Box> box, std::shared_ptr<node::ExecRecord> rec,
                              RunRequest req) {
  node::ExecOutcome o;
  auto r = calls_->RunLayers(box->layers, req);
  if (!r.ok()) {
    o.error = r.status().ToString();
    rec->Finish(o);
    return;
  }
  rec->AppendOutput(1, r->stdout_data);
  rec->AppendOutput(2, r->stderr_data);
  o.truncated[0] = r->stdout_truncated;
  o.truncated[1] = r->stderr_truncated;
  o.timed_out = r->timed_out;
  int sig = r->timed_out && r->signal == 0 ? SIGKILL : r->signal;
  if (sig > 0) {
    o.signal = SignalName(sig).substr(3);  // "KILL", as container execs say it
    o.exit_code = 128 + sig;
  } else {
    o.exit_code = r->exit_code;
  }
  rec->Finish(o);
}

}  // namespace warren::fncall
