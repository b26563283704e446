// The part of applying a filesystem policy that runs inside the sandbox's mount namespace as
// its root, through the overlay (see runtime/container/fs_guard.h for the whole sequence): in
// a container by the node's fs helper (agent/fs_helper.h), in a microVM by the guest's agent.
// The sandbox's processes are frozen meanwhile, so nothing it resolves changes under it.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "isolation/fs_policy.h"

namespace warren::isolation {

// A policy resolved inside the sandbox.
struct FsPrepared {
  std::vector<std::string> read_only, writable;
  // Directories holding a symlink on the way to a read-only tree: their entries get fixed.
  std::vector<std::string> fixed_dirs;
};

// Resolves each path and changes nothing: whether PrepareFsPolicy would accept the policy.
Status CheckFsPolicy(const FsPolicy& policy);

// Resolves each path (symlinks followed; a missing one is an invalid policy), copies up
// through the overlay every path the flags will go on (and each fixed directory's
// subdirectories, which must stay as writable as the policy says), and pins the writable
// directories above each read-only tree (bind mounts: isolation/bind_pins.h).
Result<FsPrepared> PrepareFsPolicy(const FsPolicy& policy);

// Replaces the regular file at `path` by a copy of itself (data, owner, mode, xattrs, times),
// renamed over it: descriptors and mappings opened before keep the old inode, which no name
// reaches any more.
Status SeverFile(const std::string& path);

}  // namespace warren::isolation
