// Applying a filesystem policy to the overlay's writable layer, with the sandbox frozen:
// 0. `check`: the policy's paths resolve in the sandbox (else nothing changes);
// 1. the immutable flag comes off every directory of the writable layer (only the node or the
//    guest's agent ever sets one: isolation/immutable_flags.h), so the overlay may copy up and
//    create what is needed; flagged files stay so (none has a writer to sever);
// 2. `prepare`: resolve, copy up, pin (isolation/fs_prepare.h, inside the sandbox);
// 3. each regular file about to become immutable that anyone holds open for writing
//    (isolation/write_leases.h) is severed (`sever`, inside the sandbox): neither the flag nor
//    anything else revokes a descriptor or a mapping opened before. The old inode, which only
//    those descriptors reach now, gets the flag too: reopening one through /proc/PID/fd for
//    writing is refused like any other open;
// 4. the flag goes on every directory and regular file of the read-only trees and on each
//    fixed directory, and off everything else. An empty policy clears every flag at once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "isolation/fs_policy.h"
#include "isolation/fs_prepare.h"

namespace warren::isolation {

struct FsApplySteps {
  // Before anything changes: refuses a policy the sandbox cannot take (a missing path), so a
  // refused change leaves the policy before it in force.
  std::function<Status(const FsPolicy&)> check;
  std::function<Result<FsPrepared>(const FsPolicy&)> prepare;
  std::function<Status(const std::vector<std::string>& paths)> sever;
};

struct FsPolicyStats {
  size_t flags_changed = 0;  // inodes whose immutable flag was set or cleared
  size_t severed = 0;        // files open for writing replaced by a copy
};

// `upper_fd`: the overlay's upper directory. Needs CAP_LINUX_IMMUTABLE and CAP_LEASE of the
// initial user namespace: the host's root for a container, the guest's agent for a microVM.
Result<FsPolicyStats> ApplyFsPolicyToUpper(int upper_fd, const FsPolicy& policy,
                                           const FsApplySteps& steps);

}  // namespace warren::isolation
