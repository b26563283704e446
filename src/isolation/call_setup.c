/* The isolation recipe of one fncall call's worker (see call_setup.h). libc only. */
#define _GNU_SOURCE
#include "isolation/call_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Landlock (Debian 12's headers predate the newer ABIs). */
#define LL_EXECUTE (1ull << 0)
#define LL_WRITE_FILE (1ull << 1)
#define LL_READ_FILE (1ull << 2)
#define LL_READ_DIR (1ull << 3)
#define LL_MAKE_CHAR (1ull << 6)
#define LL_MAKE_BLOCK (1ull << 11)
#define LL_REFER (1ull << 13)
#define LL_TRUNCATE (1ull << 14)
#define LL_IOCTL_DEV (1ull << 15)
#define LL_SCOPE_ABSTRACT_UNIX (1ull << 0)
#define LL_SCOPE_SIGNAL (1ull << 1)
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

struct ll_ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct __attribute__((packed)) ll_path_beneath {
  uint64_t allowed_access;
  int32_t parent_fd;
};
struct bpf_insn_ {
  uint16_t code;
  uint8_t jt, jf;
  uint32_t k;
};
struct bpf_prog_ {
  unsigned short len;
  const struct bpf_insn_* filter;
};

const char* const warren_call_proc_masks[] = {"/proc/interrupts",  "/proc/softirqs",
                                              "/proc/config.gz",   "/proc/kallsyms",
                                              "/proc/sched_debug", "/proc/latency_stats"};
const size_t warren_call_proc_masks_count =
    sizeof warren_call_proc_masks / sizeof warren_call_proc_masks[0];

/* Each step returns NULL or what failed, with errno set. */
#define TRY(step)                 \
  do {                            \
    const char* failed_ = (step); \
    if (failed_) return failed_;  \
  } while (0)

static const char* do_mount(const char* src, const char* target, const char* type,
                            unsigned long flags, const char* data) {
  return mount(src, target, type, flags, data) == 0 ? NULL : target;
}

static const char* mask_proc(unsigned flags) {
  for (size_t i = 0; i < warren_call_proc_masks_count; i++) {
    if ((flags & WARREN_CALL_PROC_MASKS_KNOWN) && (flags & WARREN_CALL_PROC_MASK_ABSENT(i)))
      continue;
    const char* p = warren_call_proc_masks[i];
    /* Absent: nothing to hide (but a missing /dev/null is a failure). */
    if (mount("/dev/null", p, NULL, MS_BIND, NULL) != 0 &&
        !(errno == ENOENT && access(p, F_OK) != 0))
      return p;
  }
  return NULL;
}

/* A reused net namespace has lo up already, unless its worker died before this. */
static const char* bring_up_lo(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return "socket for lo";
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  const char* failed = NULL;
  if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    failed = "SIOCGIFFLAGS lo";
  } else if ((ifr.ifr_flags & (IFF_UP | IFF_RUNNING)) != (IFF_UP | IFF_RUNNING)) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) failed = "SIOCSIFFLAGS lo";
  }
  int err = errno;
  close(s);
  errno = err;
  return failed;
}

static const char* landlock_allow(int ruleset, const char* path, uint64_t access) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? NULL : path; /* no such directory: nothing to allow */
  struct ll_path_beneath rule = {access, fd};
  long rc = syscall(SYS_landlock_add_rule, ruleset, 1 /* path beneath */, &rule, 0);
  int err = errno;
  close(fd);
  errno = err;
  return rc == 0 ? NULL : "landlock_add_rule";
}

/* Read and execute everywhere; write only in the call's tmpfs; no signals or abstract sockets
 * across the call's boundary (ABI 6+). A kernel without Landlock: the other layers hold. */
static const char* apply_landlock(void) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1u /* version */);
  if (abi <= 0) return NULL;
  uint64_t fs = (1ull << 13) - 1; /* execute .. make_sym */
  if (abi >= 2) fs |= LL_REFER;
  if (abi >= 3) fs |= LL_TRUNCATE;
  if (abi >= 5) fs |= LL_IOCTL_DEV;
  struct ll_ruleset_attr attr = {fs, 0, abi >= 6 ? (LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL) : 0};
  size_t size = abi >= 6 ? sizeof attr : abi >= 4 ? 16 : 8; /* older kernels refuse larger */
  int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (rs < 0) return "landlock_create_ruleset";
  const uint64_t make = fs & ~(LL_MAKE_CHAR | LL_MAKE_BLOCK | LL_IOCTL_DEV);
  const char* failed = landlock_allow(rs, "/", LL_EXECUTE | LL_READ_FILE | LL_READ_DIR);
  /* /dev/null, /dev/zero, /dev/tty...: read and write, no new nodes. */
  if (!failed)
    failed = landlock_allow(rs, "/dev", (LL_READ_FILE | LL_WRITE_FILE | LL_IOCTL_DEV) & fs);
  if (!failed) failed = landlock_allow(rs, "/tmp", make);
  if (!failed) failed = landlock_allow(rs, "/dev/shm", make);
  if (!failed && syscall(SYS_landlock_restrict_self, rs, 0) != 0) failed = "landlock_restrict_self";
  int err = errno;
  close(rs);
  errno = err;
  return failed;
}

/* As root of the runner: the call's own mounts, hostname and loopback. */
static const char* own_namespaces(const struct warren_call_params* s) {
  if ((s->flags & (WARREN_CALL_MAKE_PRIVATE | WARREN_CALL_ROOT_DONE)) == WARREN_CALL_MAKE_PRIVATE)
    TRY(do_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
  TRY(do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL));
  TRY(mask_proc(s->flags));
  char opts[128];
  snprintf(opts, sizeof opts, "size=%llu,nr_inodes=%d,mode=0700,uid=%u,gid=%u", s->tmp_bytes,
           WARREN_CALL_TMP_INODES, (unsigned)s->uid, (unsigned)s->uid);
  TRY(do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts));
  if (s->flags & WARREN_CALL_HAS_SHM)
    TRY(do_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts));
  if (!(s->flags & WARREN_CALL_ROOT_DONE))
    TRY(do_mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | s->root_flags, NULL));
  if (chdir("/tmp") != 0) return "chdir /tmp"; /* a call's usual cwd */
  if (sethostname("sandbox", 7) != 0) return "sethostname";
  return bring_up_lo();
}

const char* warren_call_setup(const struct warren_call_params* s) {
  TRY(own_namespaces(s));
  /* The call's own uid: every capability goes with root. */
  /* The system calls themselves, not glibc's wrappers, which in a process that ever had threads
   * signal each to change it too: a native pid 1 shares the forker's memory (call_worker.h). */
  if (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setresgid, s->uid, s->uid, s->uid) != 0 ||
      syscall(SYS_setresuid, s->uid, s->uid, s->uid) != 0)
    return "drop to the call's uid";
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "no_new_privs";
  TRY(apply_landlock());
  if (s->bpf_len) {
    struct bpf_prog_ prog = {(unsigned short)(s->bpf_len / 8), (const struct bpf_insn_*)s->bpf};
    if (prctl(PR_SET_SECCOMP, 2 /* filter */, &prog, 0, 0) != 0) return "seccomp";
  }
  return NULL;
}

_Static_assert(sizeof warren_call_proc_masks / sizeof warren_call_proc_masks[0] <= 24,
               "a flag bit for each mask");

unsigned warren_call_prepare_root(unsigned flags, unsigned long root_flags) {
  flags |= WARREN_CALL_PROC_MASKS_KNOWN;
  for (size_t i = 0; i < warren_call_proc_masks_count; i++)
    if (access(warren_call_proc_masks[i], F_OK) != 0 && errno == ENOENT)
      flags |= WARREN_CALL_PROC_MASK_ABSENT(i);
  if (unshare(CLONE_NEWNS) != 0) return flags;
  if ((flags & WARREN_CALL_MAKE_PRIVATE) && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    return flags;
  if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | root_flags, NULL) != 0)
    return flags;
  return flags | WARREN_CALL_ROOT_DONE;
}

void warren_call_detach_covered(unsigned flags) {
  static char info[64 * 1024];
  int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t len = 0;
  ssize_t n;
  while (len < sizeof info - 1 && (n = read(fd, info + len, sizeof info - 1 - len)) > 0)
    len += (size_t)n;
  close(fd);
  info[len] = 0;
  /* The mount points, in the order mounted (a child after its parent), to detach in reverse. */
  const char* points[128];
  size_t np = 0;
  for (char* line = info; *line && np < 128;) {
    char* end = strchr(line, '\n');
    if (end) *end = 0;
    /* "ID PARENT MAJ:MIN ROOT MOUNT-POINT ...": the fifth field (octal escapes are not ours). */
    char* field = line;
    for (int i = 0; i < 4 && field; i++) {
      field = strchr(field, ' ');
      if (field) field++;
    }
    if (field) {
      char* space = strchr(field, ' ');
      if (space) *space = 0;
      if (strncmp(field, "/proc/", 6) == 0 ||
          ((flags & WARREN_CALL_HAS_SHM) && strcmp(field, "/dev/shm") == 0))
        points[np++] = field;
    }
    if (!end) break;
    line = end + 1;
  }
  while (np > 0) umount2(points[--np], MNT_DETACH);
}
