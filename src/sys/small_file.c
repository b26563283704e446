#include "sys/small_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int warren_pread_small_file(int fd, char* buf, size_t cap) {
  size_t len = 0;
  for (;;) {
    ssize_t n = pread(fd, buf + len, cap - 1 - len, (off_t)len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    len += (size_t)n;
    if (len == cap - 1) return -1; /* more than the caller expects there */
  }
  buf[len] = 0;
  return (int)len;
}

int warren_read_small_file(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int len = warren_pread_small_file(fd, buf, cap);
  close(fd);
  return len;
}
