#include "isolation/bind_pins.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "base/unique_fd.h"

namespace warren::isolation {
namespace {

// open_tree(CLONE|RECURSIVE), optional read-only, move_mount back onto the same path: one
// detached copy of the tree, attached atomically where it came from.
Status BindInPlace(const std::string& path, bool read_only) {
  UniqueFd tree(
      open_tree(AT_FDCWD, path.c_str(),
                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW));
  if (!tree) return ErrnoStatus("open_tree clone", path);
  if (read_only) {
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (mount_setattr(tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0)
      return ErrnoStatus("mount_setattr read-only", path);
  }
  if (move_mount(tree.get(), "", AT_FDCWD, path.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return ErrnoStatus("move_mount", path);
  return Status::Ok();
}

}  // namespace

bool IsMountPoint(const std::string& path) {
  struct statx sx {};
  if (statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) != 0) return false;
  return (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
         (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

Status PinInPlace(const std::string& path) {
  if (IsMountPoint(path)) return Status::Ok();
  return BindInPlace(path, false);
}

Status BindReadOnlyInPlace(const std::string& path) { return BindInPlace(path, true); }

}  // namespace warren::isolation
