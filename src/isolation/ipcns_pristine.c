#include "isolation/ipcns_pristine.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The mount API's numbers and flags (x86-64 and arm64 share them), for a libc without it. */
#ifndef SYS_fsopen
#define SYS_fsopen 430
#define SYS_fsconfig 431
#define SYS_fsmount 432
#endif
#define WIPC_FSOPEN_CLOEXEC 0x1
#define WIPC_FSCONFIG_CMD_CREATE 6
#define WIPC_FSMOUNT_CLOEXEC 0x1
#define WIPC_MOUNT_ATTR_RDONLY 0x1
#define WIPC_MOUNT_ATTR_NOSUID 0x2
#define WIPC_MOUNT_ATTR_NODEV 0x4
#define WIPC_MOUNT_ATTR_NOEXEC 0x8

static const char* const kNextIds[3] = {
    "/proc/sys/kernel/shm_next_id", "/proc/sys/kernel/msg_next_id", "/proc/sys/kernel/sem_next_id"};

/* The knob reads "0": no object of its kind was made since it was set. */
static int unused(int fd) {
  char buf[16];
  const ssize_t n = pread(fd, buf, sizeof buf, 0);
  return n == 2 && memcmp(buf, "0\n", 2) == 0;
}

static void reset(struct warren_ipcns_probe* probe) {
  for (int i = 0; i < 3; i++) probe->next_id[i] = -1;
  probe->mqueue = -1;
  probe->empty_size = 0;
}

int warren_ipcns_probe_open(struct warren_ipcns_probe* probe) {
  reset(probe);
  for (int i = 0; i < 3; i++) {
    probe->next_id[i] = open(kNextIds[i], O_RDWR | O_CLOEXEC);
    if (probe->next_id[i] < 0 || pwrite(probe->next_id[i], "0", 1, 0) != 1) goto fail;
  }
  /* The namespace's own mqueue superblock (mounting mqueue from inside finds it, not a new
   * one), detached: never in any tree, only for the size of its root. */
  const int fs = (int)syscall(SYS_fsopen, "mqueue", WIPC_FSOPEN_CLOEXEC);
  if (fs < 0) goto fail;
  if (syscall(SYS_fsconfig, fs, WIPC_FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
    probe->mqueue = (int)syscall(SYS_fsmount, fs, WIPC_FSMOUNT_CLOEXEC,
                                 WIPC_MOUNT_ATTR_RDONLY | WIPC_MOUNT_ATTR_NOSUID |
                                     WIPC_MOUNT_ATTR_NODEV | WIPC_MOUNT_ATTR_NOEXEC);
  close(fs);
  struct stat st;
  if (probe->mqueue < 0 || fstat(probe->mqueue, &st) != 0) goto fail;
  probe->empty_size = (long long)st.st_size;
  if (warren_ipcns_probe_pristine(probe)) return 0;
fail:
  warren_ipcns_probe_close(probe);
  return -1;
}

int warren_ipcns_probe_pristine(const struct warren_ipcns_probe* probe) {
  for (int i = 0; i < 3; i++)
    if (probe->next_id[i] < 0 || !unused(probe->next_id[i])) return 0;
  struct stat st;
  return probe->mqueue >= 0 && fstat(probe->mqueue, &st) == 0 &&
         (long long)st.st_size == probe->empty_size;
}

void warren_ipcns_probe_close(struct warren_ipcns_probe* probe) {
  for (int i = 0; i < 3; i++)
    if (probe->next_id[i] >= 0) close(probe->next_id[i]);
  if (probe->mqueue >= 0) close(probe->mqueue);
  reset(probe);
}
