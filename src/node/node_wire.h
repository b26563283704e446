// The node's wire types: what an API server sends a node it reaches over the network (a
// cluster's RemoteNode) and what comes back, as strict JSON. Only what the API decides
// travels; what the node decides for itself (blob paths, network namespace fds, warm-pool
// flags) never does, so a node cannot be told to mount a path or use an fd of its choosing.
// An unknown field, a missing one or a wrong type is an error naming it.
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "isolation/fs_policy.h"
#include "isolation/overlay_changes.h"
#include "node/node_api.h"

namespace warren::node {

nlohmann::json ToWire(const NodeSandboxSpec& spec);
Result<NodeSandboxSpec> ParseWireSandboxSpec(const nlohmann::json& j);

// An exec's request (not its in-process hooks: on_record, channel commands).
nlohmann::json ToWire(const ExecSpec& spec);
Result<ExecSpec> ParseWireExecSpec(const nlohmann::json& j);
// {"rows", "cols"}, each 1 to TerminalSize::kMax (an exec's `tty`, a resize).
Result<TerminalSize> ParseWireTerminalSize(const nlohmann::json& j);

// A sandbox's exec history: {"execs": [ExecSummary...]}.
nlohmann::json ToWire(const std::vector<ExecSummary>& execs);
Result<std::vector<ExecSummary>> ParseWireExecHistory(const nlohmann::json& j);

nlohmann::json ToWire(const net::Policy& policy);
Result<net::Policy> ParseWirePolicy(const nlohmann::json& j);

nlohmann::json ToWire(const isolation::FsPolicy& policy);
Result<isolation::FsPolicy> ParseWireFsPolicy(const nlohmann::json& j);

nlohmann::json ToWire(const SandboxRuntime& rt);
Result<SandboxRuntime> ParseWireRuntime(const nlohmann::json& j);

nlohmann::json ToWire(const SnapshotSpec& spec);
Result<SnapshotSpec> ParseWireSnapshotSpec(const nlohmann::json& j);
nlohmann::json ToWire(const SnapshotLayer& layer);
Result<SnapshotLayer> ParseWireSnapshotLayer(const nlohmann::json& j);
nlohmann::json ToWire(const MemoryFork& fork);
Result<MemoryFork> ParseWireMemoryFork(const nlohmann::json& j);
// A node's MemoryFork token: 32 lowercase hex digits (node/memory_forks.h).
bool IsForkToken(const std::string& s);

nlohmann::json ToWire(const isolation::ChangeReport& report);
Result<isolation::ChangeReport> ParseWireChanges(const nlohmann::json& j);

// A node's failure, whole (code, operation, object, message, errno, retry-after), as
// {"error": {...}}: the API server decides what of it a tenant sees (NodeFault), so nothing is
// dropped on the way. Parsing never gives OK: a body that is no error is an internal one.
nlohmann::json ToWire(const Status& st);
Status ParseWireStatus(const nlohmann::json& j, const std::string& what);

}  // namespace warren::node
