// The trajectory log: every exec of a sandbox created with `trajectory: T` is a numbered step
// (0, 1, 2, ... or the request's `step`), written durably (fsynced SQLite) with its request
// digest, result, output and timings before anyone is told the result.
//
// A preempted trainer comes back and repeats its steps: a recorded step with the same request
// is replayed (`replayed: true`, the recorded output); a different request at a recorded step
// is 409; the first unrecorded step runs for real. On the sandbox that recorded the step (or
// one that re-ran it already) nothing runs; on a new sandbox the step re-runs first, so its
// files are as the trainer saw them (see Api::RerunStep), and each re-run is noted in the
// step's doc (`reruns`). Trajectories belong to the principal that made
// them: the key is OWNER/T.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace warren::server {

class StateStore;

class TrajectoryLog {
 public:
  explicit TrajectoryLog(StateStore* durable) : store_(durable) {}

  static std::string Key(const std::string& owner, const std::string& id) {
    return owner + "/" + id;
  }

  struct Decision {
    int64_t step = 0;
    std::optional<nlohmann::json> recorded;  // set: replay this step's doc
  };
  // What an exec at `step` (or the next unrecorded one) of trajectory `key` is: a replay of
  // the recorded step, or a run (the step is reserved until Record or Abandon).
  Result<Decision> Begin(const std::string& key, std::optional<int64_t> step,
                         const std::string& digest);
  // Writes the finished step (durably) and frees its reservation.
  Status Record(const std::string& key, int64_t step, const nlohmann::json& doc);
  // A sandbox was created (or handed back to a returning trainer) for trajectory `key`: its
  // execs without a step are numbered from 0 again, so the trainer's loop replays the
  // recorded steps in order and runs on from the first one not recorded.
  void Restart(const std::string& key);
  // Step `step` re-ran in sandbox `sandbox_id`, its output the same as recorded or not
  // (`diverged`): written durably, so a returning trainer does not re-run it there again.
  Status MarkApplied(const std::string& key, int64_t step, const std::string& sandbox_id,
                     bool diverged);
  // Whether a recorded step's effects are in sandbox `sandbox_id`: it ran or re-ran there.
  static bool AppliedIn(const nlohmann::json& doc, const std::string& sandbox_id);
  // Frees a reservation whose exec never started.
  void Abandon(const std::string& key, int64_t step);

  // GET /v1/trajectories/{id}: the steps without their raw output copies.
  Result<nlohmann::json> Get(const std::string& key, const std::string& id);
  // The recorded step of `exec_id` if it belongs to trajectory `key`.
  Result<nlohmann::json> FindExec(const std::string& key, const std::string& exec_id);

 private:
  StateStore* store_;
  Mutex mu_;
  std::map<std::string, std::set<int64_t>> running_
      GUARDED_BY(mu_);                                   // reserved steps per trajectory
  std::map<std::string, int64_t> next_ GUARDED_BY(mu_);  // next auto-numbered step
};

// The digest a step is matched by: the request as parsed (defaults filled in), without
// `wait` and `step`.
std::string StepDigest(const nlohmann::json& normalized_request);

}  // namespace warren::server
