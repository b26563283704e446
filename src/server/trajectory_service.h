// Trajectories: the execs of a sandbox created with `trajectory` are steps, recorded durably
// (TrajectoryLog, fsynced) before their end is announced. A trainer that comes back after
// preemption repeats its steps: each recorded one is answered from the log, and in a sandbox
// that does not hold its effects (a new one) re-runs first, saying when its output differs
// (see trajectory_service.cc). One concern of the API (server::Api forwards to it).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "base/thread_annotations.h"
#include "base/work_queue.h"
#include "node/fleet.h"
#include "node/node_api.h"
#include "server/api_types.h"
#include "server/auth.h"
#include "server/sandbox_table.h"
#include "server/trajectory.h"

namespace warren::server {

// An exec the API started (or answers from a record), and whether the caller waits for it.
struct ExecStart {
  std::shared_ptr<node::ExecRecord> rec;
  bool wait = true;
};

class TrajectoryService {
 public:
  // `durable`: the state database's fsyncing connection. `observe_exec`: each recorded or
  // re-run command's run time, for the exec histogram.
  TrajectoryService(StateStore* durable, node::Fleet* fleet, SandboxTable* sandboxes,
                    std::function<void(double seconds)> observe_exec)
      : log_(durable),
        fleet_(fleet),
        sandboxes_(sandboxes),
        observe_exec_(std::move(observe_exec)) {}

  // Creates of one trajectory are serialized (a returning trainer gets the live sandbox, and
  // concurrent creates cannot make two): held from the look-up to the record's insert.
  std::unique_lock<std::mutex> LockCreates() { return std::unique_lock(create_mu_); }
  // A sandbox (new, or the live one reattached) takes over trajectory `key` from now on.
  void Restart(const std::string& key) { log_.Restart(key); }
  // Sandbox `id` is gone: what the service kept of it goes too.
  void Forget(const std::string& id);

  // Starts (or replays) an exec of sandbox `sb`, which records a trajectory.
  Result<ExecStart> StartExec(const SandboxRecord& sb, const ExecRequest& r, node::ExecSpec es);
  // GET of an exec of such a sandbox: a replay answers as replayed, wherever it is held.
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const SandboxRecord& sb,
                                                    const std::string& exec_id);
  // GET /v1/trajectories/{id}: the steps of `who`'s trajectory.
  Result<nlohmann::json> Get(const Principal& who, const std::string& id);

  static std::string KeyOf(const SandboxRecord& sb);

 private:
  // Replays recorded step `step` in sandbox `id`, which does not hold its effects: runs it
  // there first, then answers the record (or, diverged with `stop_on_divergence`, the re-run).
  Result<ExecStart> RerunStep(node::NodeApi* node, const std::string& id, const std::string& key,
                              int64_t step, const nlohmann::json& doc, const ExecRequest& r,
                              node::ExecSpec es, bool stop_on_divergence);
  // On the recorder thread once the re-run ended (`rec` null: it is gone): completes `reply`.
  void FinishRerun(const std::shared_ptr<node::ExecRecord>& rec,
                   const std::shared_ptr<node::ExecRecord>& reply, const std::string& key,
                   int64_t step, const nlohmann::json& doc, const std::string& id,
                   bool stop_on_divergence);
  // Keeps a replayed record for GET and stream of its exec id in this sandbox.
  void KeepReplay(const std::string& sandbox_id, const std::shared_ptr<node::ExecRecord>& rec);

  TrajectoryLog log_;
  node::Fleet* fleet_;
  SandboxTable* sandboxes_;
  const std::function<void(double)> observe_exec_;
  std::mutex create_mu_;  // serializes creates of trajectories; guards no field
  Mutex mu_;
  // SANDBOX/EXEC_ID of execs answered as replays at least once (the node may hold the
  // original run under the same id); the latest of them kept whole, for GET and stream.
  std::set<std::string> replayed_ids_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<node::ExecRecord>> replays_ GUARDED_BY(mu_);
  std::deque<std::string> replay_order_ GUARDED_BY(mu_);
  std::set<std::string> rerunning_ GUARDED_BY(mu_);  // sandboxes with a step re-running
  std::map<std::string, std::string> replay_stopped_ GUARDED_BY(mu_);  // sandbox -> why
  WorkQueue recorder_;  // writes finished steps; last: destroyed (drained) first
};

}  // namespace warren::server
