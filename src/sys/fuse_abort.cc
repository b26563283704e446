#include "sys/fuse_abort.h"

#include <sys/mount.h>

#include <cerrno>

namespace warren::sys {

Status AbortFuseConnection(const std::string& mountpoint) {
  if (umount2(mountpoint.c_str(), MNT_FORCE) != 0 && errno != EBUSY && errno != EINVAL)
    return ErrnoStatus("abort FUSE connection", mountpoint);
  return Status::Ok();
}

}  // namespace warren::sys
