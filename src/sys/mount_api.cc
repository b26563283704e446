#include "sys/mount_api.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace warren::sys {

Result<UniqueFd> FsMount(const std::string& fstype, const std::string& source,
                         const std::vector<std::pair<std::string, std::string>>& options,
                         unsigned attrs) {
  UniqueFd fs(fsopen(fstype.c_str(), FSOPEN_CLOEXEC));
  if (!fs) return ErrnoStatus("fsopen", fstype);
  if (!source.empty() && fsconfig(fs.get(), FSCONFIG_SET_STRING, "source", source.c_str(), 0) != 0)
    return ErrnoStatus("fsconfig source", source);
  for (const auto& [k, v] : options) {
    int rc = v.empty() ? fsconfig(fs.get(), FSCONFIG_SET_FLAG, k.c_str(), nullptr, 0)
                       : fsconfig(fs.get(), FSCONFIG_SET_STRING, k.c_str(), v.c_str(), 0);
    if (rc != 0) return ErrnoStatus("fsconfig " + fstype + " option " + k, source);
  }
  if (fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return ErrnoStatus("fsconfig create " + fstype, source);
  UniqueFd mnt(fsmount(fs.get(), FSMOUNT_CLOEXEC, attrs));
  if (!mnt) return ErrnoStatus("fsmount " + fstype, source);
  return mnt;
}

Result<UniqueFd> CloneMount(int mount_fd) {
  UniqueFd fd(open_tree(mount_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (!fd) return ErrnoStatus("open_tree clone", "fd " + std::to_string(mount_fd));
  return fd;
}

namespace {

Status SetAttr(int mount_fd, const mount_attr& attr, const char* op) {
  mount_attr a = attr;
  if (mount_setattr(mount_fd, "", AT_EMPTY_PATH, &a, sizeof a) != 0)
    return ErrnoStatus(op, "fd " + std::to_string(mount_fd));
  return Status::Ok();
}

}  // namespace

Status IdmapMount(int mount_fd, int userns_fd, unsigned long long extra_attrs) {
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_IDMAP | extra_attrs;
  attr.userns_fd = static_cast<unsigned long long>(userns_fd);
  return SetAttr(mount_fd, attr, "mount_setattr idmap");
}

Status SetMountAttrs(int mount_fd, unsigned long long attrs) {
  mount_attr attr{};
  attr.attr_set = attrs;
  return SetAttr(mount_fd, attr, "mount_setattr");
}

Status MakeSuperblockReadOnly(int mount_fd) {
  UniqueFd fs(fspick(mount_fd, "", FSPICK_EMPTY_PATH | FSPICK_CLOEXEC));
  if (!fs) return ErrnoStatus("fspick", "fd " + std::to_string(mount_fd));
  if (fsconfig(fs.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0)
    return ErrnoStatus("fsconfig ro", "fd " + std::to_string(mount_fd));
  if (fsconfig(fs.get(), FSCONFIG_CMD_RECONFIGURE, nullptr, nullptr, 0) != 0)
    return ErrnoStatus("fsconfig reconfigure", "fd " + std::to_string(mount_fd));
  return Status::Ok();
}

Status MoveMountTo(int mount_fd, const std::string& target) {
  if (move_mount(mount_fd, "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return ErrnoStatus("move_mount", target);
  return Status::Ok();
}

}  // namespace warren::sys
