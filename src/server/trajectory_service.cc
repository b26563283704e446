// Execs of a sandbox that records a trajectory: each is a step, recorded durably before its
// end is announced; a recorded step is replayed, and on a sandbox that does not hold the
// step's effects yet (a new sandbox for a preempted trainer) it re-runs first.
//
// Why re-run: the trainer repeats its steps to get back to where it was, and the next new step
// must run in the state it saw then (the files its earlier steps wrote). The trainer still
// gets the recorded output, so its agent follows the same path; where the re-run's output
// differs (a clock, a download, randomness), the result says so (`diverged`, `rerun`), and a
// sandbox created with `on_divergence: stop` answers the re-run's own result and refuses
// further execs: the recorded path no longer describes it.
#include "server/trajectory_service.h"

#include <spdlog/spdlog.h>

#include "base/ids.h"
#include "base/utf8.h"

namespace warren::server {

using nlohmann::json;

namespace {

// Replayed records kept for GET and stream by SANDBOX/EXEC_ID; older ones answer from the log.
constexpr size_t kKeptReplays = 1000;

std::string ReplayKey(const std::string& sandbox_id, const std::string& exec_id) {
  return sandbox_id + "/" + exec_id;
}

std::string Raw(const json& doc, const char* key) {
  std::string out;
  (void)Base64Decode(doc.value(key, ""), &out);
  return out;
}

// What of a re-run differs from the recorded step (empty: nothing).
std::vector<std::string> Differences(const json& recorded_doc, const json& rerun,
                                     const node::ExecRecord& rec) {
  const json& want = recorded_doc["result"];
  std::vector<std::string> out;
  for (const char* k : {"exit_code", "signal", "timed_out"})
    if (want.value(k, json(nullptr)) != rerun.value(k, json(nullptr))) out.push_back(k);
  if (Raw(recorded_doc, "stdout_raw_b64") != rec.RawOutput(1)) out.push_back("stdout");
  if (Raw(recorded_doc, "stderr_raw_b64") != rec.RawOutput(2)) out.push_back("stderr");
  return out;
}

// The outcome and output of a result, for a divergence report.
json Summary(const json& result) {
  json j = json::object();
  for (const char* k : {"exit_code", "signal", "timed_out", "stdout", "stderr", "stdout_b64",
                        "stderr_b64", "stdout_truncated", "stderr_truncated", "duration_ms"})
    if (result.contains(k)) j[k] = result[k];
  return j;
}

Status RerunningConflict(const std::string& id) {
  return Status(
      Code::kConflict, "exec", id,
      "a recorded step is re-running in this sandbox to rebuild its state; wait for it to end");
}

}  // namespace

std::string TrajectoryService::KeyOf(const SandboxRecord& sb) {
  return TrajectoryLog::Key(sb.owner, sb.spec.trajectory.value_or(""));
}

void TrajectoryService::KeepReplay(const std::string& sandbox_id,
                                   const std::shared_ptr<node::ExecRecord>& rec) {
  const std::string key = ReplayKey(sandbox_id, rec->id());
  MutexLock lock(&mu_);
  if (replayed_ids_.size() > 100000) replayed_ids_.clear();
  replayed_ids_.insert(key);
  if (replays_.emplace(key, rec).second) replay_order_.push_back(key);
  while (replay_order_.size() > kKeptReplays) {
    replays_.erase(replay_order_.front());
    replay_order_.pop_front();
  }
}

Result<ExecStart> TrajectoryService::StartExec(const SandboxRecord& sb, const ExecRequest& r,
                                               node::ExecSpec es) {
  const std::string& id = sb.id;
  const std::string key = KeyOf(sb);
  {
    MutexLock lock(&mu_);
    if (auto it = replay_stopped_.find(id); it != replay_stopped_.end())
      return Status(Code::kConflict, "exec", id, it->second);
    if (rerunning_.count(id)) return RerunningConflict(id);
  }
  if (sb.replay_stopped) return Status(Code::kConflict, "exec", id, *sb.replay_stopped);
  node::NodeApi* node = WARREN_TRY(fleet_->Node(sb.node));
  json request = {{"argv", r.argv},
                  {"env", r.env},
                  {"cwd", r.cwd},
                  {"timeout_s", r.timeout_s},
                  {"max_output_bytes", r.max_output_bytes},
                  {"binary", r.binary}};
  if (r.stdin_data) request["stdin_b64"] = Base64Encode(*r.stdin_data);
  const std::string digest = StepDigest(request);
  auto d = WARREN_TRY(log_.Begin(
      key, r.step ? std::optional<int64_t>(static_cast<int64_t>(*r.step)) : std::nullopt, digest));
  if (d.recorded) {
    const json& doc = *d.recorded;
    if (!TrajectoryLog::AppliedIn(doc, id))
      return RerunStep(node, id, key, d.step, doc, r, std::move(es),
                       sb.spec.on_divergence == "stop");
    // GET and stream of this exec id answer the replay from now on, even where the node
    // still holds the original run.
    auto rec = node::ExecRecord::Replayed(doc["result"], id, Raw(doc, "stdout_raw_b64"),
                                          Raw(doc, "stderr_raw_b64"));
    KeepReplay(id, rec);
    return ExecStart{rec, r.wait};
  }
  request["step"] = d.step;
  const std::string started = NowRfc3339();
  // The step is written before its end is announced: the finisher runs on the mux thread when
  // the command ends and hands the write to the recorder thread, which then publishes.
  es.on_record = [this, key, step = d.step, request, digest, id,
                  started](const std::shared_ptr<node::ExecRecord>& rec) {
    std::weak_ptr<node::ExecRecord> weak = rec;
    rec->SetFinisher([this, weak, key, step, request, digest, id, started] {
      recorder_.Post([this, weak, key, step, request, digest, id, started] {
        auto rec = weak.lock();
        if (!rec) return log_.Abandon(key, step);
        json result = rec->FinalResultJson();
        // A step the infrastructure cut short (its sandbox deleted or lost) is not the
        // command's outcome: it is not recorded and runs again when repeated.
        if (result.contains("error")) {
          log_.Abandon(key, step);
          return rec->Publish();
        }
        json doc = {{"step", step},
                    {"sandbox_id", id},
                    {"exec_id", rec->id()},
                    {"request_digest", digest},
                    {"request", request},
                    {"result", result},
                    {"started_at", started},
                    {"finished_at", NowRfc3339()},
                    {"stdout_raw_b64", Base64Encode(rec->RawOutput(1))},
                    {"stderr_raw_b64", Base64Encode(rec->RawOutput(2))}};
        doc["result"]["replayed"] = false;
        observe_exec_(rec->run_seconds());
        Status st = log_.Record(key, step, doc);
        if (!st.ok()) spdlog::error("trajectory {} step {}: {}", key, step, st.ToString());
        rec->Publish();
      });
    });
  };
  auto rec = node->StartExec(id, NewExecId(), es);
  if (!rec.ok()) {
    log_.Abandon(key, d.step);
    return rec.status();
  }
  return ExecStart{*rec, r.wait};
}

// One re-run at a time per sandbox: steps rebuild the state in order, so a second exec while
// one re-runs (only possible with `wait: false`) is refused rather than run out of order.
Result<ExecStart> TrajectoryService::RerunStep(node::NodeApi* node, const std::string& id,
                                               const std::string& key, int64_t step,
                                               const json& doc, const ExecRequest& r,
                                               node::ExecSpec es, bool stop_on_divergence) {
  auto reply = node::ExecRecord::Pending(doc.value("exec_id", ""), id, r.binary);
  {
    MutexLock lock(&mu_);
    if (!rerunning_.insert(id).second) return RerunningConflict(id);
  }
  KeepReplay(id, reply);
  es.on_record = [this, reply, key, step, doc, id,
                  stop_on_divergence](const std::shared_ptr<node::ExecRecord>& rec) {
    std::weak_ptr<node::ExecRecord> weak = rec;
    rec->SetFinisher([this, weak, reply, key, step, doc, id, stop_on_divergence] {
      recorder_.Post([this, weak, reply, key, step, doc, id, stop_on_divergence] {
        FinishRerun(weak.lock(), reply, key, step, doc, id, stop_on_divergence);
      });
    });
  };
  auto rec = node->StartExec(id, NewExecId(), es);
  if (!rec.ok()) {
    // Nothing ran: no pending reply may stay behind for GET to find.
    MutexLock lock(&mu_);
    rerunning_.erase(id);
    const std::string key = ReplayKey(id, reply->id());
    replays_.erase(key);
    replayed_ids_.erase(key);
    return rec.status();
  }
  return ExecStart{reply, r.wait};
}

void TrajectoryService::FinishRerun(const std::shared_ptr<node::ExecRecord>& rec,
                                    const std::shared_ptr<node::ExecRecord>& reply,
                                    const std::string& key, int64_t step, const json& doc,
                                    const std::string& id, bool stop_on_divergence) {
  // The sandbox takes execs again before the reply is announced: a caller woken by the reply
  // may send its next step at once.
  auto done = [&] {
    MutexLock lock(&mu_);
    rerunning_.erase(id);
  };
  if (!rec) {
    done();
    reply->Complete({{"exit_code", nullptr}, {"error", "the sandbox ended while the step re-ran"}},
                    "", "", false);
    return;
  }
  json rerun = rec->FinalResultJson();
  rec->Publish();
  observe_exec_(rec->run_seconds());
  // Cut short by the infrastructure (the sandbox deleted or lost): the step's effects are not
  // in this sandbox; the caller sees the error, and a repeat re-runs it.
  if (rerun.contains("error")) {
    done();
    reply->Complete(rerun, rec->RawOutput(1), rec->RawOutput(2), false);
    return;
  }
  const std::vector<std::string> differs = Differences(doc, rerun, *rec);
  const bool diverged = !differs.empty();
  Status st = log_.MarkApplied(key, step, id, diverged);
  if (!st.ok())
    spdlog::error("trajectory {} step {}: noting the re-run in {}: {}", key, step, id,
                  st.ToString());
  if (diverged && stop_on_divergence) {
    std::string what;
    for (const auto& d : differs) what += (what.empty() ? "" : ", ") + d;
    const std::string why = "the replay stopped at step " + std::to_string(step) +
                            ": its re-run in this sandbox differed from the record (" + what + ")";
    {
      MutexLock lock(&mu_);
      replay_stopped_[id] = why;
    }
    // Durable too, so a restarted daemon refuses as well.
    auto put = sandboxes_->Update(id, [&](SandboxRecord& r) {
      r.replay_stopped = why;
      return Status::Ok();
    });
    if (!put.ok() && put.status().code() != Code::kNotFound)
      spdlog::error("sandbox {}: recording the stopped replay: {}", id, put.status().ToString());
    done();
    reply->Complete(
        rerun, rec->RawOutput(1), rec->RawOutput(2), false,
        {{"diverged", true}, {"differs", differs}, {"recorded", Summary(doc["result"])}});
    return;
  }
  json extra = nullptr;
  if (diverged) extra = {{"diverged", true}, {"differs", differs}, {"rerun", Summary(rerun)}};
  done();
  reply->Complete(doc["result"], Raw(doc, "stdout_raw_b64"), Raw(doc, "stderr_raw_b64"), true,
                  std::move(extra));
}

Result<json> TrajectoryService::Get(const Principal& who, const std::string& id) {
  return log_.Get(TrajectoryLog::Key(who.name, id), id);
}

void TrajectoryService::Forget(const std::string& id) {
  MutexLock lock(&mu_);
  replay_stopped_.erase(id);
}

Result<std::shared_ptr<node::ExecRecord>> TrajectoryService::GetExec(const SandboxRecord& sb,
                                                                     const std::string& exec_id) {
  const std::string& id = sb.id;
  const std::string key = ReplayKey(id, exec_id);
  node::NodeApi* node = WARREN_TRY(fleet_->Node(sb.node));
  auto rec = node->GetExec(id, exec_id);
  {
    MutexLock lock(&mu_);
    if (auto it = replays_.find(key); it != replays_.end()) return it->second;
    if (rec.ok() && !replayed_ids_.count(key)) return rec;
  }
  // A replayed step's exec id, or one whose record the node no longer holds: the log has it.
  auto doc = log_.FindExec(KeyOf(sb), exec_id);
  if (!doc.ok()) return rec;
  return node::ExecRecord::Replayed((*doc)["result"], id, Raw(*doc, "stdout_raw_b64"),
                                    Raw(*doc, "stderr_raw_b64"));
}

}  // namespace warren::server
