// NodeApi: what the API server asks of a node. In `warren serve` the node runs in the same
// process (LocalNode); in a cluster a RemoteNode will implement the same interface over the
// network, so the server does not change.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/status.h"
#include "net/policy.h"
#include "node/agent_conn.h"
#include "node/density/density_types.h"
#include "node/exec_record.h"
#include "runtime/backend.h"
#include "runtime/backend_kind.h"

namespace warren::node {

struct NodeSandboxSpec {
  runtime::BackendKind backend = runtime::BackendKind::kContainer;
  runtime::SandboxConfig config;  // layers carry digests; the node resolves blob paths
  net::Policy network;
  // A memory fork's child (MemoryFork::token): made from the parent's captured RAM and
  // processes on the parent's node, over exactly the parent's layers.
  std::string fork;
};

// A snapshot (issue 30): the sandbox's changes, with its workspace layer when it has one
// (`workspace`: that layer's digest, its top layer), become one workspace layer in the node's
// store, published to the shared store where there is one.
struct SnapshotSpec {
  std::string workspace;
  uint64_t max_bytes = 0;  // the most file bytes it may hold; 0: only the node's free space
};
struct SnapshotLayer {
  std::string digest;  // "sha256:<hex>" of the EROFS image
  uint64_t size = 0;   // the image's bytes
  uint64_t entries = 0, file_bytes = 0, whiteouts = 0;
};

// A microVM's memory and processes, captured once on its node for the children of a fork
// (issue 30); held there until EndFork.
struct MemoryFork {
  std::string token;
  uint64_t ram_bytes = 0;  // what the capture holds
  int64_t paused_ms = 0;   // how long the parent stood still
  int64_t capture_ms = 0;
};

struct SandboxRuntime {
  int host_pid = 0;
  uint32_t host_uid = 0;
};

// A host errno turned into a tenant's status (ENOENT -> not_found, EPERM -> forbidden, EBUSY ->
// conflict, ENOSPC -> quota) is wrong for the node's own operations (mounts, cgroups, clone,
// network): the tenant's request named nothing missing or forbidden. The API server passes
// those operations' failures through this: they become internal errors (500, the details in
// the log only). Statuses chosen on purpose, without an errno (a sandbox that does not exist,
// a state conflict the node names, an invalid request, unavailable), stay. Errors about the
// tenant's own objects (its files, through the agent) are not passed through it.
inline Status NodeFault(Status st) {
  if (st.ok() || st.err() == 0 || st.code() == Code::kInvalid || st.code() == Code::kUnavailable ||
      st.code() == Code::kInternal)
    return st;
  return Status(Code::kInternal, st.op(), st.object(), st.message(), st.err());
}

// `lost(id, reason)`: see NodeApi::SetOnSandboxLost.
using SandboxLostFn = std::function<void(const std::string& id, const std::string& reason)>;

class NodeApi {
 public:
  virtual ~NodeApi() = default;
  virtual std::string name() const = 0;
  virtual Result<SandboxRuntime> CreateSandbox(const NodeSandboxSpec& spec) = 0;
  virtual Status DeleteSandbox(const std::string& id) = 0;
  // Takes over sandbox `id` left running by an earlier run of this node (kill -9, crash):
  // its processes keep running; its exec records come back from their spill files.
  virtual Status AdoptSandbox(const std::string& id) = 0;
  // Commands running now in sandbox `id` (0 if unknown): an idle sandbox has none.
  virtual int RunningExecs(const std::string& id) = 0;
  // Kills the cgroups of sandboxes an earlier run left that were not adopted, and removes
  // their leftovers (exec journals included, but those of `also_keep`: sandboxes of the node's
  // that are records only, as fncall sandboxes are).
  virtual int ReapUnadopted(const std::set<std::string>& also_keep = {}) = 0;
  // Changes the sandbox's egress policy; connections it no longer allows are cut.
  virtual Status SetNetwork(const std::string& id, const net::Policy& policy) = 0;
  // Changes the sandbox's filesystem policy (isolation/fs_policy.h), at once for every process.
  virtual Status SetFilesystem(const std::string& id, const isolation::FsPolicy& policy) = 0;
  // What the occupant changed relative to the sandbox's layers, at or below `under`.
  virtual Result<isolation::ChangeReport> Changes(const std::string& id, const std::string& under,
                                                  size_t limit) = 0;
  // The sandbox's files as a layer (SnapshotSpec); it keeps running (frozen while read).
  virtual Result<SnapshotLayer> Snapshot(const std::string& id, const SnapshotSpec& spec) {
    (void)spec;
    return Status(Code::kUnavailable, "snapshot", id, "not supported by this node");
  }
  // Captures microVM `id`'s memory for a fork. kUnavailable where this sandbox or node cannot
  // (not a microVM, booted cold, a node without it): the caller forks its files instead.
  virtual Result<MemoryFork> PrepareFork(const std::string& id) {
    return Status(Code::kUnavailable, "fork memory", id, "not supported by this node");
  }
  // The children are made (or the fork failed): the capture goes.
  virtual Status EndFork(const std::string& token) {
    (void)token;
    return Status::Ok();
  }
  virtual Status PauseSandbox(const std::string& id) = 0;
  virtual Status ResumeSandbox(const std::string& id) = 0;
  virtual Result<std::shared_ptr<ExecRecord>> StartExec(const std::string& id,
                                                        const std::string& exec_id,
                                                        const ExecSpec& spec) = 0;
  virtual Result<std::shared_ptr<ExecRecord>> GetExec(const std::string& id,
                                                      const std::string& exec_id) = 0;
  virtual Status SignalExec(const std::string& id, const std::string& exec_id, int sig) = 0;
  // The commands sandbox `id` keeps (running, and its last finished ones), in start order.
  // A sandbox that keeps none (fncall) has an empty history.
  virtual Result<std::vector<ExecSummary>> ExecHistory(const std::string& id) = 0;
  // More input for a running command started with ExecSpec::stdin_open, tty or channel; `eof`
  // closes its stdin (a terminal gets its end-of-file character instead). kConflict when the
  // command takes no input or has ended.
  virtual Status WriteExecStdin(const std::string& id, const std::string& exec_id,
                                std::string_view data, bool eof) = 0;
  // A desktop sandbox's screen as PNG, and input steps for it; kConflict for a sandbox
  // without a display.
  virtual Result<std::string> Screenshot(const std::string& id) = 0;
  virtual Status DesktopInput(const std::string& id, const std::vector<InputStep>& steps) = 0;
  // A new size for the terminal of a command started with ExecSpec::tty.
  virtual Status ResizeExec(const std::string& id, const std::string& exec_id,
                            TerminalSize size) = 0;
  virtual Status WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                           std::string_view data) = 0;
  virtual Result<std::string> ReadFile(const std::string& id, const std::string& path,
                                       uint64_t max) = 0;
  virtual nlohmann::json Info() = 0;
  // How sandbox `id` stands for density (active, idle, hibernated; its memory in RAM and in
  // swap; its wakes). kUnavailable on a node that does not track it.
  virtual Result<density::SandboxDensity> Density(const std::string& id) {
    return Status(Code::kUnavailable, "read density", id, "not tracked by this node");
  }
  // Sandboxes whose agent died by itself (OOM of the agent, crash) or that the node failed
  // (a chunked layer's reads fail): the server marks them failed with `reason` ("" when the
  // agent simply exited). Called from a node thread.
  virtual void SetOnSandboxLost(SandboxLostFn fn) = 0;
  // The node's fncall service (node/fncall/calls.h): a CallRequest -> its CallResult, or with
  // `batch` {"calls": [...]} -> {"results": [...]}. Unavailable on a node without one.
  virtual Result<nlohmann::json> RunCall(const nlohmann::json& request, bool batch) {
    (void)request;
    return Status(Code::kUnavailable, batch ? "call batch" : "call", name(),
                  "this node runs no fncall service");
  }
};

}  // namespace warren::node
