// Walking a tree the occupant controls as host root (the change report, snapshots): every
// lookup stays beneath its directory fd and follows no symlink on the way (openat2), so a
// symlink swapped in mid-walk leads nowhere, never to the host's files; and overlay's mark
// for a deleted entry.
#pragma once

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string>

namespace warren::isolation {

inline int OpenBeneath(int dirfd, const std::string& rel, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return static_cast<int>(syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof how));
}

// An overlay whiteout: a character device 0/0.
inline bool IsWhiteout(const struct stat& st) {
  return S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
}

}  // namespace warren::isolation
