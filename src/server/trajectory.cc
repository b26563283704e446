#include "server/trajectory.h"

#include "base/sha256.h"
#include "server/state_store.h"

namespace warren::server {

using nlohmann::json;

std::string StepDigest(const json& req) {
  json j = req;
  j.erase("wait");
  j.erase("step");
  return "sha256:" + Sha256Hex(j.dump());  // nlohmann orders keys: a canonical form
}

Result<TrajectoryLog::Decision> TrajectoryLog::Begin(const std::string& key,
                                                     std::optional<int64_t> step,
                                                     const std::string& digest) {
  MutexLock lock(&mu_);
  auto next = next_.find(key);
  if (next == next_.end()) next = next_.emplace(key, store_->MaxStep(key) + 1).first;
  Decision d;
  d.step = step ? *step : next->second;
  if (d.step > 4294967295LL)
    return Status(Code::kConflict, "exec", key,
                  "the trajectory has no step number left (the last is 4294967295)");
  auto& running = running_[key];
  if (running.count(d.step))
    return Status(Code::kConflict, "exec step " + std::to_string(d.step), key,
                  "this step is running now");
  auto rec = store_->GetStep(key, d.step);
  if (rec.ok()) {
    if (rec->value("request_digest", "") != digest)
      return Status(Code::kConflict, "exec step " + std::to_string(d.step), key,
                    "the step was recorded with a different request (" +
                        rec->value("request_digest", "") + ")");
    d.recorded = *rec;
  } else {
    running.insert(d.step);
  }
  next->second = std::max(next->second, d.step + 1);
  return d;
}

Status TrajectoryLog::Record(const std::string& key, int64_t step, const json& doc) {
  Status st = store_->InsertStep(key, step, doc.value("exec_id", ""), doc);
  MutexLock lock(&mu_);
  running_[key].erase(step);
  return st;
}

Status TrajectoryLog::MarkApplied(const std::string& key, int64_t step,
                                  const std::string& sandbox_id, bool diverged) {
  MutexLock lock(&mu_);  // one read-modify-write of a step's doc at a time
  json doc = WARREN_TRY(store_->GetStep(key, step));
  if (!doc.contains("reruns") || !doc["reruns"].is_array()) doc["reruns"] = json::array();
  doc["reruns"].push_back({{"sandbox_id", sandbox_id}, {"diverged", diverged}});
  return store_->UpdateStep(key, step, doc);
}

bool TrajectoryLog::AppliedIn(const json& doc, const std::string& sandbox_id) {
  if (doc.value("sandbox_id", "") == sandbox_id) return true;
  if (auto it = doc.find("reruns"); it != doc.end() && it->is_array())
    for (const auto& r : *it)
      if (r.is_object() && r.value("sandbox_id", "") == sandbox_id) return true;
  return false;
}

void TrajectoryLog::Restart(const std::string& key) {
  MutexLock lock(&mu_);
  next_[key] = 0;
}

void TrajectoryLog::Abandon(const std::string& key, int64_t step) {
  MutexLock lock(&mu_);
  running_[key].erase(step);
}

Result<json> TrajectoryLog::Get(const std::string& key, const std::string& id) {
  json steps = json::array();
  for (json s : store_->ListSteps(key)) {
    s.erase("stdout_raw_b64");
    s.erase("stderr_raw_b64");
    steps.push_back(std::move(s));
  }
  if (steps.empty()) return NotFound("trajectory", id);
  return json{{"id", id}, {"steps", steps}};
}

Result<json> TrajectoryLog::FindExec(const std::string& key, const std::string& exec_id) {
  json found = WARREN_TRY(store_->FindStepByExec(exec_id));
  if (found.value("traj", "") != key) return NotFound("exec", exec_id);
  return found["doc"];
}

}  // namespace warren::server
