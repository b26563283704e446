// Whether anyone holds a file open for writing: the kernel refuses a read lease
// (F_SETLEASE, F_RDLCK) on an inode with any writer, which counts every descriptor opened for
// writing wherever it is (a process's table, a message in flight on a unix socket) and every
// shared writable mapping (which holds such a descriptor). Needs CAP_LEASE or the file's
// ownership; /proc/sys/fs/leases-enable must be 1.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

// The regular file open (read-only, by us) at `fd`. An error with errno EINVAL if leases are
// off on this host.
Result<bool> HasWriters(int fd, const std::string& what);

}  // namespace warren::isolation
