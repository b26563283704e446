// Tool layers are immutable: a tool's files can be read and run by the occupant, never
// changed, replaced, renamed over, hard-linked over or shadowed, by any process of the
// sandbox, root included.
//
// Tool layers stay merged into the sandbox's root (workspace > tools > base, as before), and
// every path a tool layer brings is covered by a mount made from inside the sandbox before it
// is sealed (isolation/bind_pins.h):
// - a tool's own directory, /opt/tools/NAME, and any other directory no other layer has (but
//   /opt and /opt/tools themselves), is bound onto itself read-only, whole;
// - any other file of the tool (one in /etc, /usr/bin...) is bound onto itself read-only, alone;
//   a symlink's directory is bound read-only (a symlink cannot be a mount point), except `/`;
// - every directory above those (/opt, /opt/tools, /usr/bin...) is pinned (bound onto itself,
//   writable): a mount point cannot be renamed or removed, so nothing can move a tool's tree
//   aside and put another in its place.
// Whiteouts of a tool layer (base files it deletes) are not guarded.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace warren::isolation {

// Paths inside the sandbox's root, each starting with `/`, parents before children.
struct ToolGuardPlan {
  std::vector<std::string> pins;
  std::vector<std::string> read_only;
};

// A tool layer with more separately guarded files than this is refused (a tool should keep
// its files under /opt/tools/NAME or in directories of its own).
inline constexpr size_t kMaxToolGuardMounts = 4096;

// Walks the tool layer mounted at dirfd `layer_fd`; `other_layer_fds` are the sandbox's other
// layers, which tell a directory of the tool's own from one it shares.
Result<ToolGuardPlan> PlanToolGuard(int layer_fd, const std::vector<int>& other_layer_fds);

// Merges the plans of several tool layers (a path guarded read-only by one is not pinned by
// another).
ToolGuardPlan MergeToolGuardPlans(const std::vector<ToolGuardPlan>& plans);

// Makes the plan's mounts under `root` (the sandbox's root, not yet pivoted into).
Status ApplyToolGuard(const ToolGuardPlan& plan, const std::string& root);

}  // namespace warren::isolation
