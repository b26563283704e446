/* A small file read whole into a buffer: /proc and /sys files a few lines long. libc only, C:
 * built into warren-zygote.so (the fncall zygote) and into the node. */
#ifndef WARREN_SYS_SMALL_FILE_H_
#define WARREN_SYS_SMALL_FILE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `path` into `buf` (NUL-terminated) and returns its length; -1 if it cannot be opened
 * or does not fit in `cap` - 1 bytes (more than the caller ever expects to find there). */
int warren_read_small_file(const char* path, char* buf, size_t cap);

/* The same from an open file, read again from its start (pread: a /proc seq file shows its
 * state at each read from offset 0), so a file checked often is opened once. */
int warren_pread_small_file(int fd, char* buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_SYS_SMALL_FILE_H_ */
