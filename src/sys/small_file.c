#include "sys/small_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

int warren_read_small_file(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
    if (len == cap - 1) { /* more than the caller expects there */
      close(fd);
      return -1;
    }
  }
  close(fd);
  buf[len] = 0;
  return (int)len;
}
