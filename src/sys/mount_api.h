// The new mount API (fsopen/fsconfig/fsmount/open_tree/move_mount/mount_setattr) as calls
// returning Status. glibc 2.36 declares these in <sys/mount.h>.
//
// Why the new API: mount(8) silently attaches a loop device for a file-backed EROFS image,
// and detached mounts held by fd let the node keep one mount per layer without putting it
// anywhere in the host's tree.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::sys {

// Creates a detached mount of filesystem `fstype` with string options (key, value); a value
// of "" sets a flag option. `attrs` are MOUNT_ATTR_* for fsmount.
Result<UniqueFd> FsMount(const std::string& fstype, const std::string& source,
                         const std::vector<std::pair<std::string, std::string>>& options,
                         unsigned attrs);

// open_tree(OPEN_TREE_CLONE) of a mount fd: a new detached copy sharing the superblock.
Result<UniqueFd> CloneMount(int mount_fd);

// Idmaps a detached mount with the mapping of user namespace `userns_fd` and sets `extra`
// MOUNT_ATTR_* flags too (e.g. read-only).
Status IdmapMount(int mount_fd, int userns_fd, unsigned long long extra_attrs);

// Sets MOUNT_ATTR_* flags `attrs` on a mount (e.g. read-only once it has been filled).
Status SetMountAttrs(int mount_fd, unsigned long long attrs);

// Makes the filesystem of a mount read-only for every mount of it (fspick, then a reconfigure
// with "ro"): making it writable again takes CAP_SYS_ADMIN in the user namespace that owns the
// superblock, which a mount's own read-only flag alone would not (a clone of the mount could
// clear its flag).
Status MakeSuperblockReadOnly(int mount_fd);

// Attaches a detached mount at `target` (path resolved by the caller's root/cwd).
Status MoveMountTo(int mount_fd, const std::string& target);

}  // namespace warren::sys
