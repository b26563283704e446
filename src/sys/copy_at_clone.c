/* See copy_at_clone.h. */
#define _GNU_SOURCE
#include "sys/copy_at_clone.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define PAGE 4096ul
#define PM_PRESENT (1ull << 63)
#define PM_EXCLUSIVE (1ull << 56) /* mapped by this process alone (Linux 4.2) */
#define PM_CHUNK 512              /* pagemap entries read at a time */

/* /proc/self/maps whole, NUL-terminated, in a buffer the caller frees; NULL with errno. */
static char* read_maps(void) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  size_t cap = 16384, len = 0;
  char* buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    if (len + 1 == cap) {
      char* more = realloc(buf, cap *= 2);
      if (!more) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = more;
    }
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      free(buf);
      buf = NULL;
      break;
    }
    if (n == 0) {
      buf[len] = 0;
      break;
    }
    len += (size_t)n;
  }
  int err = errno;
  close(fd);
  errno = err;
  return buf;
}

/* The pagemap entries of [start, start + n pages) into `e`; 0, or -1 with errno. */
static int read_entries(int pagemap, uintptr_t start, size_t n, uint64_t* e) {
  size_t want = n * sizeof *e, got = 0;
  while (got < want) {
    ssize_t r = pread(pagemap, (char*)e + got, want - got, (off_t)(start / PAGE * 8 + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

long warren_written_pages(uintptr_t* out, size_t cap) {
  char* maps = read_maps();
  if (!maps) return -1;
  int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) {
    int err = errno;
    free(maps);
    errno = err;
    return -1;
  }
  long found = 0;
  uint64_t e[PM_CHUNK];
  for (char* line = maps; *line && (size_t)found < cap;) {
    char* end = strchr(line, '\n');
    if (end) *end = 0;
    unsigned long lo, hi;
    char perms[8];
    /* Private and writable: what a clone shares copy-on-write (the stack too). */
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && strcmp(perms, "rw-p") == 0) {
      for (uintptr_t at = lo; at < hi && (size_t)found < cap;) {
        size_t n = (hi - at) / PAGE < PM_CHUNK ? (hi - at) / PAGE : PM_CHUNK;
        if (read_entries(pagemap, at, n, e) != 0) {
          found = -1;
          break;
        }
        for (size_t i = 0; i < n && (size_t)found < cap; i++)
          if ((e[i] & (PM_PRESENT | PM_EXCLUSIVE)) == (PM_PRESENT | PM_EXCLUSIVE))
            out[found++] = at + i * PAGE;
        at += n * PAGE;
      }
    }
    if (found < 0 || !end) break;
    line = end + 1;
  }
  int err = errno;
  close(pagemap);
  free(maps);
  errno = err;
  return found;
}

static int g_ring = -1; /* holds the pins for the process's life */

static int by_address(const void* a, const void* b) {
  const uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b;
  return x < y ? -1 : x > y;
}

long warren_copy_at_clone(const uintptr_t* given, size_t n) {
  if (g_ring >= 0) {
    errno = EBUSY;
    return -1;
  }
  /* Each page once and in order (the callers' lists are in any order, pages in both at once):
   * consecutive pages make one registered buffer. */
  uintptr_t* pages = malloc(n ? n * sizeof *pages : 1);
  if (!pages) return -1;
  for (size_t i = 0; i < n; i++) pages[i] = given[i] & ~(PAGE - 1);
  qsort(pages, n, sizeof *pages, by_address);
  size_t unique = 0;
  for (size_t i = 0; i < n; i++)
    if (unique == 0 || pages[i] != pages[unique - 1]) pages[unique++] = pages[i];
  n = unique;
  int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) {
    free(pages);
    return -1;
  }
  /* Runs of consecutive pages the parent has, one registered buffer each. */
  struct iovec* runs = calloc(n ? n : 1, sizeof *runs);
  size_t nruns = 0;
  long pinned = 0;
  for (size_t i = 0; runs && i < n; i++) {
    uint64_t e;
    if (read_entries(pagemap, pages[i], 1, &e) != 0 || !(e & PM_PRESENT)) continue;
    struct iovec* last = nruns ? &runs[nruns - 1] : NULL;
    if (last && (uintptr_t)last->iov_base + last->iov_len == pages[i])
      last->iov_len += PAGE;
    else
      runs[nruns++] = (struct iovec){(void*)pages[i], PAGE};
    pinned++;
  }
  close(pagemap);
  free(pages);
  if (!runs) return -1;
  int err = 0;
  if (nruns == 0) {
    free(runs);
    return 0;
  }
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  int ring = (int)syscall(SYS_io_uring_setup, 1, &params); /* O_CLOEXEC, from the kernel */
  if (ring < 0) {
    err = errno;
  } else if (syscall(SYS_io_uring_register, ring, IORING_REGISTER_BUFFERS, runs, nruns) != 0) {
    err = errno;
    close(ring);
  } else {
    g_ring = ring;
  }
  free(runs);
  if (err) {
    errno = err;
    return -1;
  }
  return pinned;
}

#define LIST_MAX 65536 /* pages a sample may list */

int warren_send_written_pages(int fd) {
  prctl(PR_SET_DUMPABLE, 1);
  const size_t bytes = (LIST_MAX + 1) * sizeof(uint64_t);
  uint64_t* list = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (list == MAP_FAILED) return -1;
  long n = warren_written_pages((uintptr_t*)(list + 1), LIST_MAX);
  if (n < 0) return -1;
  list[0] = (uint64_t)n;
  const char* p = (const char*)list;
  size_t left = (size_t)(n + 1) * sizeof(uint64_t);
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    left -= (size_t)w;
  }
  return 0;
}

long warren_copy_at_clone_from_list(const void* list, size_t len, const uintptr_t* own, size_t nown,
                                    const char** why) {
  uint64_t count = 0;
  if (len < 8 || (memcpy(&count, list, 8), count > LIST_MAX) || len != 8 + count * 8) {
    *why = "the sample did not list its pages";
    return -1;
  }
  /* It may follow a frame of any length: copied out to be aligned. */
  const size_t all = (size_t)count + nown;
  uintptr_t* pages = malloc(all ? all * sizeof(uintptr_t) : 1);
  if (!pages) {
    *why = "malloc";
    return -1;
  }
  memcpy(pages, (const char*)list + 8, count * sizeof(uintptr_t));
  if (nown) memcpy(pages + count, own, nown * sizeof(uintptr_t));
  long pinned = warren_copy_at_clone(pages, all);
  int err = errno;
  free(pages);
  if (pinned < 0)
    *why = err == EPERM || err == ENOSYS ? "io_uring is refused here"
           : err == ENOMEM               ? "RLIMIT_MEMLOCK"
                                         : "io_uring_register";
  return pinned;
}
