// What density reports of a sandbox and of the node (the API, /metrics, `warren inspect`).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "isolation/cgroup_memory.h"
#include "isolation/node_swap.h"
#include "node/density/idle_clock.h"

namespace warren::node::density {

struct SandboxDensity {
  Activity activity = Activity::kActive;
  bool user_paused = false;
  double quiet_s = 0;
  double cpus = 0;
  isolation::MemoryUse memory;
  uint64_t reclaimed_bytes = 0;
  uint64_t wakes = 0;
  double last_wake_ms = 0, max_wake_ms = 0;
};

struct NodeDensity {
  bool enabled = false;
  uint64_t budget_bytes = 0;
  double memory_overcommit = 1, cpu_overcommit = 1;
  uint64_t committed_memory_bytes = 0;
  double committed_cpus = 0, host_cpus = 0;
  uint64_t used_bytes = 0;  // sandboxes' resident memory plus the swap device's RAM
  uint64_t reclaimed_bytes = 0;
  uint64_t pressure_reclaims = 0, refused_creates = 0;
  std::map<std::string, int> sandboxes;  // activity -> count
  uint64_t wakes = 0;
  double wake_p50_ms = 0, wake_p99_ms = 0, wake_max_ms = 0;
  std::string swap_mode, swap_device, swap_error;
  isolation::SwapStats swap;
};

// As the API shows them: sizes in bytes, times in ms or s, activity by name.
nlohmann::json SandboxDensityJson(const SandboxDensity& d);
nlohmann::json NodeDensityJson(const NodeDensity& n);
// SandboxDensityJson's output read back (a node's answer over the cluster wire); an unknown,
// missing or mistyped field is an error naming it.
Result<SandboxDensity> ParseSandboxDensity(const nlohmann::json& j);

}  // namespace warren::node::density
