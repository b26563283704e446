// The API as typed actions: every HTTP route maps to one method here. No HTTP or Asio in
// this file; http_server.cc parses requests, checks auth, runs these on a blocking pool and
// writes the results. Errors are Status values that the server turns into the contract's
// error body.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>

#include "base/thread_annotations.h"
#include "base/work_queue.h"
#include "image/layer_store.h"
#include "node/node_api.h"
#include "node/fncall/call_pool.h"
#include "server/api_types.h"
#include "server/auth.h"
#include "server/leases.h"
#include "server/quota.h"
#include "server/sandbox_record.h"
#include "server/sandbox_table.h"
#include "server/state_store.h"
#include "server/trajectory.h"

namespace warren::server {

using Query = std::map<std::string, std::string>;

// Prometheus histogram with fixed buckets (seconds).
class Histogram {
 public:
  void Observe(double seconds);
  std::string Render(const std::string& name) const;

 private:
  static constexpr double kBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                        0.25,  0.5,    1,     2.5,  5,     10};
  mutable Mutex mu_;
  uint64_t counts_[std::size(kBuckets)] GUARDED_BY(mu_) = {};
  uint64_t total_ GUARDED_BY(mu_) = 0;
  double sum_ GUARDED_BY(mu_) = 0;
};

class Api {
 public:
  // `durable`: a second connection to the state database that fsyncs every commit, for the
  // trajectory log.
  Api(StateStore* state, StateStore* durable, node::NodeApi* node, image::LayerStore* layers,
      TokenRegistry* tokens);
  ~Api();

  // Deletes sandboxes whose ttl_s has passed, from a background thread, until Stop().
  void StartReaper();
  void StopReaper();

  // Marks sandboxes recorded by an earlier daemon run as failed (their processes were reaped
  // at startup; re-adoption comes with restart safety).
  void ReconcileAfterRestart();
  // After a clean shutdown deleted every sandbox: their records say so.
  void MarkAllStopped();

  Result<nlohmann::json> CreateSandbox(const Principal& who, const std::string& body);
  Result<nlohmann::json> CreateBatch(const Principal& who, const std::string& body);
  Result<nlohmann::json> GetSandbox(const Principal& who, const std::string& id);
  Result<nlohmann::json> ListSandboxes(const Principal& who, const Query& q);
  Status DeleteSandbox(const Principal& who, const std::string& id);
  // Freezes (true) or thaws (false) a sandbox; repeating the current state is a no-op.
  Result<nlohmann::json> SetPaused(const Principal& who, const std::string& id, bool paused);
  Result<nlohmann::json> SetNetwork(const Principal& who, const std::string& id,
                                    const std::string& body);
  // Changes the filesystem policy (read-only trees) of a running or paused sandbox.
  Result<nlohmann::json> SetFilesystem(const Principal& who, const std::string& id,
                                       const std::string& body);
  // What the occupant changed relative to the sandbox's layers (?path=PREFIX&limit=N).
  Result<nlohmann::json> Changes(const Principal& who, const std::string& id, const Query& q);

  struct ExecStart {
    std::shared_ptr<node::ExecRecord> rec;
    bool wait = true;
  };
  Result<ExecStart> StartExec(const Principal& who, const std::string& id, const std::string& body);
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const Principal& who, const std::string& id,
                                                    const std::string& exec_id);
  Status SignalExec(const Principal& who, const std::string& id, const std::string& exec_id,
                    const std::string& body);
  void ObserveExec(double seconds) { exec_seconds_.Observe(seconds); }

  Status PutFile(const Principal& who, const std::string& id, const Query& q,
                 const std::string& body);
  Result<std::string> GetFile(const Principal& who, const std::string& id, const Query& q);
  Status PutArchive(const Principal& who, const std::string& id, const Query& q,
                    const std::string& body);
  Result<std::string> GetArchive(const Principal& who, const std::string& id, const Query& q);

  Result<nlohmann::json> UploadLayer(const Query& q, const std::string& body_path);
  // Removes every stored blob no layer name and no sandbox refers to, and build leftovers
  // (at startup: a crash may have left either).
  void SweepBlobs();
  Result<nlohmann::json> ListLayers();
  Status DeleteLayer(const std::string& ref);

  Result<nlohmann::json> CreateToken(const std::string& body) { return tokens_->Create(body); }
  nlohmann::json ListTokens();
  Status DeleteToken(const std::string& name) { return tokens_->Remove(name); }

  Result<nlohmann::json> CreateLease(const Principal& who, const std::string& body) {
    return leases_.Create(who, body);
  }
  Result<nlohmann::json> RenewLease(const Principal& who, const std::string& id,
                                    const std::string& body) {
    return leases_.Renew(who, id, body);
  }
  Result<nlohmann::json> GetTrajectory(const Principal& who, const std::string& id);
  // Releases the lease and applies its sandboxes' on_lease_expiry now.
  Status ReleaseLease(const Principal& who, const std::string& id);

  // fncall (POST /v1/calls and fncall sandboxes): off until set; stopped before the node
  // deletes everything. The service outlives the Api.
  void SetCalls(fncall::CallService* calls);
  void StopCalls();
  Result<nlohmann::json> Call(const Principal& who, const std::string& body);
  Result<nlohmann::json> CallBatch(const Principal& who, const std::string& body);
  // Runs `n` calls' worth of work under the caller's call quotas, counting them in the metrics.
  Result<nlohmann::json> RunCalls(const Principal& who, int64_t n,
                                  const std::function<Result<nlohmann::json>()>& run);

  nlohmann::json Nodes();
  std::string Metrics();
  void CountError(Code code);
  std::string TempPath(const std::string& what) const { return layers_->TempPath(what); }

 private:
  // The absolute `path` of a file operation on running sandbox `id` (no other parameters).
  Result<std::string> RunningPath(const Principal& who, const std::string& id, const Query& q,
                                  const char* op);
  // `reserved`: the caller already took the quota share (batches do, in item order).
  Result<nlohmann::json> CreateOne(const Principal& who, const SandboxSpec& spec,
                                   bool reserved = false);
  // The sandbox record if `who` may see it; not_found otherwise (never forbidden: other
  // principals' sandboxes do not exist for them).
  Result<SandboxRecord> Sandbox(const Principal& who, const std::string& id);
  // Removes those of `digests` that no layer name and no sandbox refers to any more.
  void CollectBlobs(const std::vector<std::string>& digests);
  std::set<std::string> DigestsInUse();
  Result<nlohmann::json> Reattach(const Principal& who, const SandboxSpec& spec, SandboxRecord sb);
  // Starts (or replays) an exec of a sandbox that records a trajectory (trajectory_exec.cc).
  Result<ExecStart> StartTrajectoryExec(const SandboxRecord& sb, const ExecRequest& r,
                                        node::ExecSpec es);
  // Replays recorded step `step` in sandbox `id`, which does not hold its effects: runs it
  // there first, then answers the record (or, diverged with `stop_on_divergence`, the re-run).
  Result<ExecStart> RerunStep(const std::string& id, const std::string& key, int64_t step,
                              const nlohmann::json& doc, const ExecRequest& r, node::ExecSpec es,
                              bool stop_on_divergence);
  // On the recorder thread once the re-run ended (`rec` null: it is gone): completes `reply`.
  void FinishRerun(const std::shared_ptr<node::ExecRecord>& rec,
                   const std::shared_ptr<node::ExecRecord>& reply, const std::string& key,
                   int64_t step, const nlohmann::json& doc, const std::string& id,
                   bool stop_on_divergence);
  // GET of an exec of a trajectory sandbox: a replay answers as replayed, wherever it is held.
  Result<std::shared_ptr<node::ExecRecord>> GetTrajectoryExec(const SandboxRecord& sb,
                                                              const std::string& exec_id);
  // Keeps a replayed record for GET and stream of its exec id in this sandbox.
  void KeepReplay(const std::string& sandbox_id, const std::shared_ptr<node::ExecRecord>& rec);
  static std::string TrajectoryKeyOf(const SandboxRecord& sb);
  // Deletes or pauses (on_lease_expiry) every sandbox tied to lease `id`.
  void ExpireLease(const std::string& id);

  StateStore* state_;
  SandboxTable sandboxes_;
  node::NodeApi* node_;
  image::LayerStore* layers_;
  TokenRegistry* tokens_;
  QuotaTracker quota_;
  LeaseTable leases_;
  // Blob garbage collection takes it exclusively; a create holds it shared from resolving
  // NAME:TAG to digests until the layers are mounted, so a blob is never removed in between.
  std::shared_mutex gc_mu_;
  Histogram create_seconds_, exec_seconds_, call_seconds_;
  fncall::CallService* calls_ = nullptr;
  Mutex reap_mu_;
  std::condition_variable_any reap_cv_;
  bool reap_stop_ GUARDED_BY(reap_mu_) = false;
  std::thread reaper_;
  std::map<std::string, double> deadlines_
      GUARDED_BY(reap_mu_);  // sandbox id -> monotonic deadline
  struct Idle {
    double timeout = 0, last = 0;  // seconds; monotonic time of the last use
  };
  std::map<std::string, Idle> idle_ GUARDED_BY(reap_mu_);  // sandboxes with an idle_timeout_s
  // Marks sandbox `id` as used now (idle timeout).
  void Touch(const std::string& id);
  // Gives back the quota share a sandbox record held.
  void ReleaseQuotaOf(const SandboxRecord& sb);
  Mutex err_mu_;
  std::map<std::string, uint64_t> errors_ GUARDED_BY(err_mu_);
  uint64_t calls_started_ GUARDED_BY(err_mu_) = 0;
  uint64_t calls_refused_ GUARDED_BY(err_mu_) = 0;
  TrajectoryLog traj_;
  std::mutex traj_create_mu_;  // serializes creates of trajectories; guards no field
  Mutex replayed_mu_;
  // SANDBOX/EXEC_ID of execs answered as replays at least once (the node may hold the
  // original run under the same id); the latest of them kept whole, for GET and stream.
  std::set<std::string> replayed_ids_ GUARDED_BY(replayed_mu_);
  std::map<std::string, std::shared_ptr<node::ExecRecord>> replays_ GUARDED_BY(replayed_mu_);
  std::deque<std::string> replay_order_ GUARDED_BY(replayed_mu_);
  std::set<std::string> rerunning_ GUARDED_BY(replayed_mu_);  // sandboxes with a step re-running
  // sandbox -> why it takes no execs
  std::map<std::string, std::string> replay_stopped_ GUARDED_BY(replayed_mu_);
  WorkQueue recorder_;  // writes finished trajectory steps; last: destroyed first
};

}  // namespace warren::server
