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
  dev_t dev = 0;

  // `fd` is the directory at `path`, opened O_RDONLY.
  Status Dir(int fd, const std::string& path) {
    if (descend(path)) {
      for (const auto& name : WARREN_TRY(sys::ListDir(fd))) {
        const std::string child = (path == "/" ? "" : path) + "/" + name;
        struct stat st;
        if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoStatus("stat", child);
        if (st.st_dev != dev) continue;  // never another filesystem
        if (S_ISDIR(st.st_mode)) {
          UniqueFd sub(openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
          if (!sub) return ErrnoStatus("open", child);
          WARREN_RETURN_IF_ERROR(Dir(sub.get(), child));
        } else if (S_ISREG(st.st_mode)) {
          UniqueFd f(openat(fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
          if (!f) return ErrnoStatus("open", child);
          WARREN_RETURN_IF_ERROR(visit(f.get(), FlagWalkEntry{child, false}));
        }
      }
    }
    return visit(fd, FlagWalkEntry{path, true});
  }
};

}  // namespace

Result<bool> IsImmutable(int fd) {
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return ErrnoStatus("FS_IOC_GETFLAGS", "fd " + std::to_string(fd));
  return (flags & FS_IMMUTABLE_FL) != 0;
}

Status SetImmutable(int fd, bool on, const std::string& what) {
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return ErrnoStatus("FS_IOC_GETFLAGS", what);
  flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  if (ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0) return ErrnoStatus(on ? "chattr +i" : "chattr -i", what);
  return Status::Ok();
}

Status WalkUpper(int dirfd, const std::function<bool(const std::string&)>& descend, const UpperVisitor& visit) {
  UniqueFd root(openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return ErrnoStatus("open", "upper layer");
  struct stat st;
  if (fstat(root.get(), &st) != 0) return ErrnoStatus("stat", "upper layer");
  Walk w{descend, visit, st.st_dev};
  return w.Dir(root.get(), "/");
}

Result<size_t> ApplyImmutableFlags(int dirfd, const std::function<bool(const FlagWalkEntry&)>& want,
                                   const std::function<bool(const std::string&)>& descend) {
  size_t changed = 0;
  WARREN_RETURN_IF_ERROR(WalkUpper(dirfd, descend, [&](int fd, const FlagWalkEntry& e) -> Status {
    const bool on = want(e);
    if (WARREN_TRY(IsImmutable(fd)) == on) return Status::Ok();
    WARREN_RETURN_IF_ERROR(SetImmutable(fd, on, e.path));
    ++changed;
    return Status::Ok();
  }));
  return changed;
}

}  // namespace warren::isolation
