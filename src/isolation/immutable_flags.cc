#include "isolation/immutable_flags.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/unique_fd.h"
#include "sys/dir_list.h"

namespace warren::isolation {
namespace {

struct Walk {
  const std::function<bool(const std::string&)>& descend;
  const UpperVisitor& visit;
  uint32_t dev_major = 0, dev_minor = 0;

  // `fd` is the directory at `path`, opened O_RDONLY; its own entry is visited by the caller.
  Status Dir(int fd, const std::string& path, int depth = 0) {
    if (!descend(path)) return Status::Ok();
    // Each level holds an fd and a stack frame: an occupant's endless chain of directories
    // must be refused, not followed until the node runs out of either.
    if (depth > kMaxWalkDepth)
      return Status(Code::kInvalid, "walk", "writable layer",
                    "directories nested deeper than " + std::to_string(kMaxWalkDepth) + " levels");
    for (const auto& name : WARREN_TRY(sys::ListDir(fd))) {
      const std::string child = (path == "/" ? "" : path) + "/" + name;
      struct statx sx {};
      if (statx(fd, name.c_str(), AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_NLINK, &sx) != 0)
        return ErrnoStatus("stat", child);
      if (sx.stx_dev_major != dev_major || sx.stx_dev_minor != dev_minor)
        continue;  // never another filesystem
      const bool immutable = (sx.stx_attributes_mask & STATX_ATTR_IMMUTABLE)
                                 ? (sx.stx_attributes & STATX_ATTR_IMMUTABLE) != 0
                                 : true;  // unknown: look (OpenEntry + ioctl)
      if (S_ISDIR(sx.stx_mode)) {
        UniqueFd sub(openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub) return ErrnoStatus("open", child);
        WARREN_RETURN_IF_ERROR(Dir(sub.get(), child, depth + 1));
        WARREN_RETURN_IF_ERROR(visit(FlagWalkEntry{child, true, immutable, fd, name}));
      } else if (S_ISREG(sx.stx_mode)) {
        FlagWalkEntry e{child, false, immutable, fd, name};
        e.nlink = sx.stx_nlink;
        WARREN_RETURN_IF_ERROR(visit(e));
      }
    }
    return Status::Ok();
  }
};

}  // namespace

Result<bool> IsImmutable(int fd) {
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0)
    return ErrnoStatus("FS_IOC_GETFLAGS", "fd " + std::to_string(fd));
  return (flags & FS_IMMUTABLE_FL) != 0;
}

Status SetImmutable(int fd, bool on, const std::string& what) {
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return ErrnoStatus("FS_IOC_GETFLAGS", what);
  flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  if (ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0)
    return ErrnoStatus(on ? "chattr +i" : "chattr -i", what);
  return Status::Ok();
}

Result<UniqueFd> OpenEntry(const FlagWalkEntry& e) {
  if (e.parent_fd < 0) {
    UniqueFd fd(fcntl(e.fd, F_DUPFD_CLOEXEC, 0));
    if (!fd) return ErrnoStatus("dup", e.path);
    return fd;
  }
  UniqueFd fd(openat(e.parent_fd, e.name.c_str(),
                     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (e.dir ? O_DIRECTORY : 0)));
  if (!fd) return ErrnoStatus("open", e.path);
  return fd;
}

Status WalkUpper(int dirfd, const std::function<bool(const std::string&)>& descend,
                 const UpperVisitor& visit) {
  UniqueFd root(openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return ErrnoStatus("open", "upper layer");
  struct statx sx {};
  if (statx(root.get(), "", AT_EMPTY_PATH, STATX_TYPE, &sx) != 0)
    return ErrnoStatus("stat", "upper layer");
  Walk w{descend, visit, sx.stx_dev_major, sx.stx_dev_minor};
  WARREN_RETURN_IF_ERROR(w.Dir(root.get(), "/"));
  const std::string slash = "/", none;
  FlagWalkEntry e{slash, true, true, -1, none, root.get()};
  e.immutable = WARREN_TRY(IsImmutable(root.get()));
  return visit(e);
}

Result<size_t> ApplyImmutableFlags(int dirfd, const std::function<bool(const FlagWalkEntry&)>& want,
                                   const std::function<bool(const std::string&)>& descend) {
  size_t changed = 0;
  WARREN_RETURN_IF_ERROR(WalkUpper(dirfd, descend, [&](const FlagWalkEntry& e) -> Status {
    const bool on = want(e);
    if (e.immutable == on) return Status::Ok();
    UniqueFd fd = WARREN_TRY(OpenEntry(e));
    if (WARREN_TRY(IsImmutable(fd.get())) == on) return Status::Ok();
    WARREN_RETURN_IF_ERROR(SetImmutable(fd.get(), on, e.path));
    ++changed;
    return Status::Ok();
  }));
  return changed;
}

}  // namespace warren::isolation
