#include "sys/pidfd_ns.h"

#include <sys/ioctl.h>

namespace warren::sys {

Result<UniqueFd> OpenNetnsOfPidfd(int pidfd) {
  // <linux/pidfd.h> of Linux 6.11 (PIDFS_IOCTL_MAGIC 0xFF, number 4); Debian 12's headers
  // predate it.
  constexpr unsigned long kPidfdGetNetNamespace = _IO(0xFF, 4);
  UniqueFd fd(ioctl(pidfd, kPidfdGetNetNamespace, 0));
  if (!fd) return ErrnoStatus("ioctl PIDFD_GET_NET_NAMESPACE", "process");
  return fd;
}

}  // namespace warren::sys
