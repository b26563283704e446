// A sandbox as the API server keeps it: the spec it was made from, its state and its own
// fields, typed. Stored as JSON (the contract's Sandbox object, which is also what GET
// returns), parsed strictly on the way back: a record with a field this version does not know,
// or without one it needs, is an error, not a silent default.
//
// States and the moves between them (anything else is refused, see CanMove):
//
//   creating ──> running <──> paused
//      │            │           │
//      │            └──> stopping <┘      stopping ──> running | paused  (the delete failed)
//      └──────────> failed <────────┘     running | paused ──> failed (its init exited, or
//                                                                       not adopted)
//   creating | running | paused | stopping ──> lost: its node left the cluster (stopped
//   heartbeating); `reason` says why. lost ──> running | paused: the node came back and still
//   runs it; lost ──> failed: it came back without it.
//
// `deleted` is the contract's name for a record that is gone: deletion removes it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/api_types.h"

namespace warren::server {

enum class SandboxState { kCreating, kRunning, kPaused, kStopping, kFailed, kLost };

const char* StateName(SandboxState s);
Result<SandboxState> ParseSandboxState(std::string_view name);
// Every state, in the order metrics list them.
inline constexpr SandboxState kAllSandboxStates[] = {
    SandboxState::kCreating, SandboxState::kRunning, SandboxState::kPaused,
    SandboxState::kStopping, SandboxState::kFailed,  SandboxState::kLost};
// Whether a sandbox may move from `from` to `to` (see the diagram above).
bool CanMove(SandboxState from, SandboxState to);
// Running or paused: its processes exist and it can be changed (network, filesystem).
inline bool IsLive(SandboxState s) {
  return s == SandboxState::kRunning || s == SandboxState::kPaused;
}

struct SandboxRecord {
  // One layer it was made from: the reference asked for, its role and the digest it resolved
  // to (tags move; what the sandbox was made from does not).
  struct Layer {
    std::string ref, role, digest;
  };
  struct Error {
    std::string code, message;
  };
  // A fork's child (issue 30): the sandbox it was forked from and the snapshot it starts
  // from (also its workspace layer; `snapshot_ref` is the snapshot's NAME:TAG, or empty when
  // the fork named none).
  // A fork's child: its parent, the snapshot it was made from ("" for a memory fork that was
  // not named) and whether it carries the parent's memory and processes (a microVM).
  struct Lineage {
    std::string parent, snapshot, snapshot_ref;
    bool memory = false;
  };

  std::string id;
  std::string owner;  // the principal that made it
  std::string node;
  std::string created_at;  // RFC 3339
  SandboxState state = SandboxState::kCreating;
  SandboxSpec spec;
  std::vector<Layer> layers;
  std::optional<Error> error;
  // Set when a replayed trajectory step diverged under `on_divergence: stop`: why the
  // sandbox takes no more execs.
  std::optional<std::string> replay_stopped;
  // State `lost` only: why (its node stopped heartbeating, ...).
  std::optional<std::string> reason;
  std::optional<Lineage> lineage;
};

Result<SandboxRecord> ParseSandboxRecord(const nlohmann::json& j);
// The contract's Sandbox: the spec's fields, then the record's own.
nlohmann::json ToJson(const SandboxRecord& r);

}  // namespace warren::server
