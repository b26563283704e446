#include "isolation/write_leases.h"

#include <fcntl.h>

namespace warren::isolation {

Result<bool> HasWriters(int fd, const std::string& what) {
  if (fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
    (void)fcntl(fd, F_SETLEASE, F_UNLCK);
    return false;
  }
  if (errno == EAGAIN) return true;
  return ErrnoStatus("F_SETLEASE (probe for writers)", what);
}

}  // namespace warren::isolation
