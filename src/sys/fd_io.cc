#include "sys/fd_io.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace warren::sys {

bool WriteFull(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p = {fd, POLLOUT, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool ReadFull(int fd, size_t n, std::string* out) {
  out->resize(n);
  return ReadExact(fd, out->data(), n);
}

bool ReadExact(int fd, void* buf, size_t n) {
  size_t off = 0;
  while (off < n) {
    ssize_t r = read(fd, static_cast<char*>(buf) + off, n - off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    off += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace warren::sys
