// The sandbox's root filesystem: overlayfs over idmapped EROFS layer mounts, with a
// size-limited tmpfs as the writable upper layer.
//
// Child half only: runs inside the sandbox's new user and mount namespaces (in the agent,
// before anything of the occupant runs). The parent half — mounting each layer once per host
// and cloning+idmapping it for this sandbox — lives in image/erofs_mount_cache and
// runtime/container.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::isolation {

// A directory that exists on the host and stays empty there: each sandbox mounts its own
// tmpfs on it inside its own mount namespace, so every sandbox can use the same path.
inline constexpr const char* kStagingDir = "/run/warren/staging";

struct RootfsPlan {
  std::vector<UniqueFd> layers;  // detached idmapped mounts, top (workspace) first
  uint64_t disk_bytes = 1ull << 30;
  uint64_t inodes = 0;  // 0: derived from disk_bytes
  // A VM's guest root (not in a user namespace) keeps overlay's marks in trusted.* xattrs:
  // the guest kernel's tmpfs may have no user.* ones (before Linux 6.6), and without them a
  // directory made where a lower entry was deleted cannot be marked opaque (EIO).
  bool trusted_xattrs = false;
};

// Makes every mount private, mounts the staging tmpfs, attaches the layers and mounts the
// overlay. On success *merged is the absolute path of the new root (not yet pivoted into).
Status BuildRootfs(RootfsPlan& plan, std::string* merged);

// Guards the files of the layers at `tool_indexes` (positions in the plan's layer order) with
// read-only mounts in the merged root (see isolation/tool_guard.h). After BuildRootfs, before
// the pivot.
Status GuardToolLayers(const std::vector<size_t>& tool_indexes, size_t layer_count,
                       const std::string& merged);

// The directory of the staging tmpfs that holds the overlay's upper directory, at `upper`.
inline constexpr const char* kUpperDirName = "upper";

// pivot_root into `new_root` and detach the old root, so no host path stays reachable.
Status PivotInto(const std::string& new_root);

}  // namespace warren::isolation
