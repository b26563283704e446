// The host half of a container sandbox's filesystem integrity: its filesystem policy
// (isolation/fs_policy.h) applied while it runs, and the report of what its occupant changed
// (isolation/overlay_changes.h).
//
// Applying a policy, with every process of the sandbox frozen by the caller:
// 1. every immutable flag of the writable layer comes off (the node set them all: nothing in
//    the sandbox can), so the overlay may copy up what the new policy needs;
// 2. the fs helper (agent/fs_helper.h) resolves the policy's paths inside the sandbox, copies up
//    every directory to flag and pins the directories above each read-only tree;
// 3. each regular file about to become immutable that anyone holds open for writing (a read
//    lease probe, isolation/write_leases.h: descriptors anywhere, in flight on a socket too,
//    and shared writable mappings) is severed by the helper: replaced by a copy, so whatever
//    was opened before writes to an inode no name leads to any more;
// 4. the flag goes on every directory and regular file of the read-only trees in the writable
//    layer, and on each directory holding a symlink on the way to one.
// What the layers hold is read-only already (EROFS); what is only in a layer cannot be copied
// up into a flagged directory, so it cannot be changed either.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/status.h"
#include "isolation/fs_policy.h"
#include "isolation/overlay_changes.h"

namespace warren::runtime {

struct FsPolicyStats {
  size_t flags_changed = 0;  // inodes whose immutable flag was set or cleared
  size_t severed = 0;        // files open for writing replaced by a copy
};

// `agent_pid`: the sandbox's agent (host pid); `agent_exe`: an fd of the warren-agent binary
// (run as the fs helper). The caller has frozen the sandbox and holds it alive.
Result<FsPolicyStats> ApplyFsPolicy(pid_t agent_pid, int agent_exe, const isolation::FsPolicy& policy);

Result<isolation::ChangeReport> ReadFsChanges(pid_t agent_pid, const std::string& under, size_t limit);

}  // namespace warren::runtime
