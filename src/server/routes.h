// The API as typed actions: every HTTP route maps to one method here. No HTTP or Asio in
// this file; http_server.cc parses requests, checks auth, runs these on a blocking pool and
// writes the results. Errors are Status values that the server turns into the contract's
// error body.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/thread_annotations.h"
#include "image/layer_store.h"
#include "node/fleet.h"
#include "node/fncall/calls.h"
#include "node/node_api.h"
#include "server/api_types.h"
#include "server/auth.h"
#include "server/call_gate.h"
#include "server/histogram.h"
#include "server/layer_service.h"
#include "server/leases.h"
#include "server/metrics.h"
#include "server/metrics_history.h"
#include "server/quota.h"
#include "server/rate_gate.h"
#include "server/reaper.h"
#include "server/sandbox_record.h"
#include "server/sandbox_table.h"
#include "server/state_store.h"
#include "server/trajectory_service.h"

namespace warren::server {

using Query = std::map<std::string, std::string>;

class Api {
 public:
  // `durable`: a second connection to the state database that fsyncs every commit, for the
  // trajectory log.
  // `fleet`: the nodes sandboxes go to (warren serve: its one LocalNode).
  Api(StateStore* state, StateStore* durable, node::Fleet* fleet, image::LayerStore* layers,
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
  // Cleans up the creates an API server of the cluster left half-made when it died: each
  // record still `creating` whose maker is gone is deleted on its node (a node that is still
  // making it destroys it when done) and removed, giving back what it held. Returns how many.
  int CleanOrphanedCreates();
  // A cluster's API servers each reap the sandboxes they made at their TTL; the replica
  // sweeping the cluster's TTL index (cluster/expiry_sweeper.h) calls this for every sandbox
  // whose ttl_s passed, whoever made it. Deleting twice is harmless (one delete wins).
  Status ExpireSandbox(const std::string& id);
  // On a cluster no replica sees all of a sandbox's use: each reports the uses it serves to
  // `used(id, idle_timeout_s)` (cluster/idle_refresher.h) and reaps no one for idleness
  // itself; the sweeping replica calls EndIfIdle for each sandbox whose idle deadline passed.
  void SetUseRecorder(std::function<void(const std::string& id, double idle_timeout_s)> used);
  // Deletes sandbox `id` unless a command runs in it (or its node is out of reach): whether it
  // did; not_found when it is gone.
  Result<bool> EndIfIdle(const std::string& id);

  Result<nlohmann::json> CreateSandbox(const Principal& who, const std::string& body);
  // Typed forms for protocols served beside the contract's (server/e2b/): the same checks,
  // quotas and records.
  Result<SandboxRecord> CreateSandbox(const Principal& who, const SandboxSpec& spec);
  Result<SandboxRecord> FindSandbox(const Principal& who, const std::string& id) {
    return Sandbox(who, id);
  }
  // Every sandbox `who` sees, in no particular order.
  Result<std::vector<SandboxRecord>> OwnedSandboxes(const Principal& who);
  // Sandbox `id` ends `seconds` from now (its ttl_s becomes its age plus `seconds`).
  Result<SandboxRecord> SetTimeout(const Principal& who, const std::string& id, double seconds);
  // Runs `argv` in running sandbox `id` as its root and waits for it (killed at `timeout_ms`):
  // the record, whatever its exit status. `stdin_data`: its input, or none.
  Result<std::shared_ptr<node::ExecRecord>> RunInSandbox(
      const Principal& who, const std::string& id, std::vector<std::string> argv,
      const std::string* stdin_data, uint64_t max_output, int timeout_ms = 300000);
  Status WriteFile(const Principal& who, const std::string& id, const std::string& path,
                   uint32_t mode, std::string_view data);
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
  // Issue 30 (server/fork.cc). Snapshot {"tag": NAME:TAG, "max_mb"?}: the sandbox's files,
  // its workspace layer and its changes, as one workspace layer named NAME:TAG. Fork
  // {"count": N, "tag"?}: N new sandboxes from one snapshot of it, all or none.
  Result<nlohmann::json> Snapshot(const Principal& who, const std::string& id,
                                  const std::string& body);
  Result<nlohmann::json> Fork(const Principal& who, const std::string& id, const std::string& body);

  using ExecStart = server::ExecStart;
  Result<ExecStart> StartExec(const Principal& who, const std::string& id, const std::string& body);
  Result<ExecStart> StartExec(const Principal& who, const std::string& id, ExecRequest r);
  Result<std::shared_ptr<node::ExecRecord>> GetExec(const Principal& who, const std::string& id,
                                                    const std::string& exec_id);
  // The commands a live sandbox's node keeps (running and the last finished ones), oldest
  // first, without their output: {"execs": [...]}.
  Result<nlohmann::json> ExecHistory(const Principal& who, const std::string& id);
  Status SignalExec(const Principal& who, const std::string& id, const std::string& exec_id,
                    const std::string& body);
  Status SignalExec(const Principal& who, const std::string& id, const std::string& exec_id,
                    int signal);
  // Input for an exec started with `tty` or `stdin_open` (ParseExecInput's body).
  Status WriteExecInput(const Principal& who, const std::string& id, const std::string& exec_id,
                        const std::string& body);
  Status WriteExecInput(const Principal& who, const std::string& id, const std::string& exec_id,
                        const ExecInput& in);
  // A desktop sandbox's screen as PNG, and a client's input actions (server/input_actions.h).
  Result<std::string> Screen(const Principal& who, const std::string& id);
  Status Input(const Principal& who, const std::string& id, const std::string& body);
  // A new size {"rows", "cols"} for an exec's terminal.
  Status ResizeExec(const Principal& who, const std::string& id, const std::string& exec_id,
                    const std::string& body);
  Status ResizeExec(const Principal& who, const std::string& id, const std::string& exec_id,
                    node::TerminalSize size);
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
  // One image: its record, how it is stored, and for a chunked one what each node read and
  // fetched of it (its blobfsd's counters).
  Result<nlohmann::json> InspectLayer(const std::string& ref);
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
  Result<nlohmann::json> GetTrajectory(const Principal& who, const std::string& id) {
    return trajectories_.Get(who, id);
  }
  // Releases the lease and applies its sandboxes' on_lease_expiry now.
  Status ReleaseLease(const Principal& who, const std::string& id);

  // fncall (POST /v1/calls and fncall sandboxes): off until set; stopped before the node
  // deletes everything. The service outlives the Api.
  void SetCalls(fncall::Calls* calls);
  void StopCalls();
  Result<nlohmann::json> Call(const Principal& who, const std::string& body);
  Result<nlohmann::json> CallBatch(const Principal& who, const std::string& body);

  nlohmann::json Nodes();
  // Cordon: the node takes no new sandboxes. Drain: that, and every sandbox on it is deleted
  // (as by its owner: quota and room given back, lease holders' sandboxes gone). Uncordon:
  // back in placement. Answers {"node", "state", "deleted", "errors"}.
  enum class NodeAdmin { kCordon, kUncordon, kDrain };
  Result<nlohmann::json> SetNodeAdmin(const std::string& node, NodeAdmin action);
  std::string Metrics();
  // The dashboard's figures (GET /v1/stats): the last hour of this API server's samples and
  // its calls' verdicts and runner pool. Sampling runs between StartHistory and StopHistory.
  nlohmann::json Stats();
  void StartHistory() { history_.Start(); }
  void StopHistory() { history_.Stop(); }
  void CountError(Code code);
  std::string TempPath(const std::string& what) const { return layers_.TempPath(what); }

 private:
  // A running desktop sandbox's record and node, for its screen and input (`op` names the
  // ask in errors: 409 without a display, or not running).
  struct DesktopTarget {
    SandboxRecord sb;
    node::NodeApi* node;
  };
  Result<DesktopTarget> Desktop(const Principal& who, const std::string& id, const char* op,
                                RateGate* gate);
  // Per sandbox: screenshots 10/s (burst 20), input requests 50/s (burst 100).
  RateGate screen_rate_{10, 20};
  RateGate input_rate_{50, 100};
  // The absolute `path` of a file operation on running sandbox `id` (no other parameters), and
  // the node that holds the sandbox.
  struct RunningTarget {
    std::string path;
    node::NodeApi* node;
  };
  Result<RunningTarget> RunningPath(const Principal& who, const std::string& id, const Query& q,
                                    const char* op);
  // The node sandbox `sb` lives on (kUnavailable while it cannot be reached).
  Result<node::NodeApi*> NodeOf(const SandboxRecord& sb);
  // What placement was asked for sandbox `sb` (to give its room back).
  static node::PlacementAsk AskOf(const SandboxSpec& spec,
                                  const std::vector<SandboxRecord::Layer>& layers);
  // A fork's child: its lineage (the snapshot is its workspace) and the parent's layers
  // below its workspace, by digest. The fork holds the blob pin for it.
  // A memory fork's child (`memory`: the node's MemoryFork token) is made on the parent's
  // `node` over all of the parent's layers (`below`), its snapshot only named.
  struct ForkOrigin {
    SandboxRecord::Lineage lineage;
    std::vector<SandboxRecord::Layer> below;
    std::string node, memory;
  };
  // `reserved`: the caller already took the quota share (batches do, in item order).
  // `fork`: a fork's child (no name in the spec is resolved; no lease expiry applied).
  Result<nlohmann::json> CreateOne(const Principal& who, const SandboxSpec& spec,
                                   bool reserved = false, const ForkOrigin* fork = nullptr);
  // Takes `n` quota shares for `spec` in item order: which were taken; the refusals go in
  // `results`. Fails only when the shares cannot be read (a cluster's store).
  Result<std::vector<bool>> ReserveShares(const Principal& who, const SandboxSpec& spec, int64_t n,
                                          std::vector<Result<nlohmann::json>>* results);
  void ReleaseShares(const Principal& who, const SandboxSpec& spec,
                     const std::vector<bool>& reserved);
  // The creates whose share was reserved, several at once; each result in `results`.
  void RunCreates(const Principal& who, const SandboxSpec& spec, const std::vector<bool>& reserved,
                  std::vector<Result<nlohmann::json>>* results, const ForkOrigin* fork = nullptr);
  // Snapshots sandbox `sb` on its node into a layer: its digest and size, and the node's
  // counts. `max_bytes`: the most file bytes it may hold (0: as much as the node has room for).
  Result<node::SnapshotLayer> SnapshotOf(const SandboxRecord& sb, uint64_t max_bytes);
  // The sandbox record if `who` may see it; not_found otherwise (never forbidden: other
  // principals' sandboxes do not exist for them).
  Result<SandboxRecord> Sandbox(const Principal& who, const std::string& id);
  Result<nlohmann::json> Reattach(const Principal& who, const SandboxSpec& spec, SandboxRecord sb);
  // Node `node` left the cluster: its sandboxes become `lost` (with `reason`) and give back
  // their quota shares.
  void NodeLost(const std::string& node, const std::string& reason);
  // Deletes or pauses (on_lease_expiry) every sandbox tied to lease `id`.
  void ExpireLease(const std::string& id);

  StateStore* state_;
  SandboxTable sandboxes_;
  node::Fleet* fleet_;
  LayerService layers_;
  TokenRegistry* tokens_;
  QuotaTracker quota_;
  LeaseTable leases_;
  // placement_seconds_: choosing a node and holding room there (a cluster's reservation).
  Histogram create_seconds_, exec_seconds_, placement_seconds_;
  CallGate calls_;        // after quota_, whose tracker it shares
  SandboxReaper reaper_;  // after what its hooks use
  // After what it samples: the counters above.
  MetricsHistory history_;
  // Marks the sandbox as used now (idle timeout).
  void Touch(const SandboxRecord& sb);
  // The idle timeout this replica's reaper keeps for `spec` (none where use is recorded).
  std::optional<double> LocalIdleTimeout(const SandboxSpec& spec) const;
  std::function<void(const std::string&, double)> used_;  // set before serving
  // Gives back the quota share and the node room a sandbox record held (once).
  void ReleaseQuotaOf(const SandboxRecord& sb);
  ErrorCounts errors_;
  FleetSample SampleCounters() const;
  // Last: destroyed first, draining its recorder (which updates sandbox records).
  TrajectoryService trajectories_;
};

}  // namespace warren::server
