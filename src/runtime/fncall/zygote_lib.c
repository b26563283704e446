/* warren-zygote.so: the fncall zygote's loop and a Python worker's set-up, in C.
 *
 * zygote.py loads this into its zygote (ctypes, from a memfd) and calls warren_zygote(),
 * which never returns in the zygote: it serves the dispatcher's fork requests there. It
 * returns only in a new worker W, cloned into fresh mount, pid, ipc, net and uts
 * namespaces, with the call's pipes on fds 0-4, its own /proc, /tmp and /dev/shm, a
 * read-only /, lo up, the call's uid, no capabilities, no_new_privs, Landlock and seccomp: the
 * recipe of isolation/call_setup.c, which native workers (agent/call_worker.h) apply too.
 * There it also waits for the call and applies the first part of its request (files, cwd,
 * rlimits: runtime/fncall/zygote_request.h) and returns the length of the rest.
 * zygote.py's worker_main follows the same steps in Python where this library cannot load.
 *
 * Why C: each clone write-protects every page of the zygote, and every page a process then
 * writes is copied. A Python loop writes a few hundred pages per clone in the zygote (refcounts,
 * allocator pools) and the same again in W's set-up through ctypes; here the zygote touches its
 * stack and two buffers, and W returns to Python with its set-up done. Plain C with libc only:
 * it is loaded into whatever python3 the runner image has. The wire format is zygote.py's
 * (one JSON datagram per message on a SOCK_SEQPACKET socket, fds as SCM_RIGHTS).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "isolation/call_limits.h"
#include "isolation/call_setup.h"
#include "isolation/ipcns_pristine.h"
#include "isolation/netns_pristine.h"
#include "runtime/fncall/zygote_request.h"
#include "sys/code_huge_pages.h"
#include "sys/copy_at_clone.h"
#include "sys/small_file.h"

#define WZ_FDS 5 /* request, stdin, stdout, stderr, status */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* ---- W: the worker's set-up. Any failure is reported on its status pipe (fd 4) as a frame
 * {"error": "worker setup: WHAT: STRERROR"}, and W ends. */

static void write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

/* W's report on its status pipe: a frame whose header is the JSON `fmt` makes (no payload). */
__attribute__((format(printf, 1, 2))) static void write_report(const char* fmt, ...) {
  char body[512];
  va_list ap;
  va_start(ap, fmt);
  int hlen = vsnprintf(body + 8, sizeof body - 8, fmt, ap);
  va_end(ap);
  if (hlen < 0 || hlen > (int)sizeof body - 9) hlen = (int)sizeof body - 9;
  uint32_t total = 4u + (uint32_t)hlen, h = (uint32_t)hlen;
  memcpy(body, &total, 4);
  memcpy(body + 4, &h, 4);
  write_all(4, body, 8u + (size_t)hlen);
}

static void setup_failed(const char* what) {
  write_report("{\"error\":\"worker setup: %s: %s\"}", what, strerror(errno));
  _exit(1);
}

/* Moves the five received fds to 0-4 (request on 3, status on 4, the program's stdio on 0-2)
 * and closes every other fd. They may arrive on any numbers, 3 and 4 included: first out of
 * the way, then into place. */
static void place_fds(const int* fds) {
  static const int target[WZ_FDS] = {3, 0, 1, 2, 4};
  int high[WZ_FDS];
  for (int i = 0; i < WZ_FDS; i++) {
    high[i] = fcntl(fds[i], F_DUPFD, 10);
    if (high[i] < 0) _exit(1); /* nowhere to report: the zygote reports our end */
  }
  for (int i = 0; i < WZ_FDS; i++)
    if (dup2(high[i], target[i]) < 0) _exit(1);
  if (syscall(SYS_close_range, 5u, ~0u, 0u) != 0) { /* before Linux 5.9 */
    struct rlimit rl;
    long max =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1048576 ? (long)rl.rlim_cur : 1048576;
    for (long fd = 5; fd < max; fd++) close((int)fd);
  }
}

static void worker_setup(uid_t uid, unsigned long long tmp_bytes, unsigned flags,
                         unsigned long root_flags, const void* bpf, size_t bpf_len) {
  const struct warren_call_params setup = {uid, tmp_bytes, flags, root_flags, bpf, bpf_len};
  const char* failed = warren_call_setup(&setup);
  if (failed) setup_failed(failed);
}

/* ---- W: the first part of its request (runtime/fncall/zygote_request.h), applied before any
 * Python runs: each page the interpreter would write doing this is a copy. */

/* 1: all `n` bytes read; 0: the pipe ended first (at once: the runner is going away). */
static int read_full(int fd, void* buf, size_t n) {
  char* p = buf;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    p += r;
    n -= (size_t)r;
  }
  return 1;
}

/* The call ended before its program ran: `message` on its stderr, an exit code as its report. */
static void end_call(int code, const char* what, const char* object) {
  char line[512];
  int n = snprintf(line, sizeof line, "warren: %s %s: %s\n", what, object, strerror(errno));
  if (n > 0) write_all(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
  write_report("{\"exit_code\":%d,\"signal\":0,\"cpu_ms\":0,\"maxrss_kb\":0}", code);
  _exit(code);
}

/* `len` bytes of the request pipe into `fd`: spliced, so no buffer of ours is written. */
static int copy_from_request(int fd, uint64_t len) {
  char buf[4096];
  while (len) {
    ssize_t n = splice(3, NULL, fd, NULL, len < (1u << 30) ? (size_t)len : (1u << 30), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL) { /* no splice into this file system: copy */
      n = read(3, buf, len < sizeof buf ? (size_t)len : sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0 && write(fd, buf, (size_t)n) != n) return -1;
    }
    if (n <= 0) {
      if (n == 0) errno = EPIPE;
      return -1;
    }
    len -= (uint64_t)n;
  }
  return 0;
}

/* The address space the worker has now, which a call's limit comes on top of. */
static uint64_t vm_bytes(void) {
  char buf[128];
  int n = warren_read_small_file("/proc/self/statm", buf, sizeof buf);
  if (n <= 0) return 0;
  return strtoull(buf, NULL, 10) * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void set_limits(const struct wz_request_head* h, uint64_t as_base) {
  struct warren_call_limits l = h->limits;
  if (l.as_bytes) l.as_bytes += as_base;
  const char* failed = warren_call_set_limits(&l);
  if (failed) setup_failed(failed);
}

/* Waits for the request, writes its files, enters its cwd and sets its limits; returns the
 * length of the marshal'd rest, which Python reads from fd 3. */
static int worker_request(void) {
  uint32_t head_len;
  if (!read_full(3, &head_len, sizeof head_len)) _exit(0); /* the runner is going away */
  if (head_len < sizeof(struct wz_request_head) || head_len > WZ_REQUEST_HEAD_MAX) {
    errno = EPROTO;
    setup_failed("request");
  }
  char* head = malloc(head_len);
  if (!head) setup_failed("request");
  if (!read_full(3, head, head_len)) {
    errno = EPIPE;
    setup_failed("request");
  }
  struct wz_request_head h;
  memcpy(&h, head, sizeof h);
  size_t pos = sizeof h;
  if (h.version != WZ_REQUEST_VERSION || h.cwd_len > head_len - pos) {
    errno = EPROTO;
    setup_failed("request");
  }
  char cwd[4096];
  if (h.cwd_len >= sizeof cwd) {
    errno = ENAMETOOLONG;
    setup_failed("request");
  }
  memcpy(cwd, head + pos, h.cwd_len);
  cwd[h.cwd_len] = 0;
  pos += h.cwd_len;
  for (uint32_t i = 0; i < h.nfiles; i++) {
    struct wz_request_file f;
    if (head_len - pos < sizeof f) {
      errno = EPROTO;
      setup_failed("request");
    }
    memcpy(&f, head + pos, sizeof f);
    pos += sizeof f;
    char path[5 + 256] = "/tmp/";
    if (f.name_len == 0 || f.name_len > 255 || f.name_len > head_len - pos ||
        memchr(head + pos, '/', f.name_len) || memchr(head + pos, 0, f.name_len)) {
      errno = EPROTO;
      setup_failed("request");
    }
    memcpy(path + 5, head + pos, f.name_len);
    path[5 + f.name_len] = 0;
    pos += f.name_len;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, f.mode & 07777);
    if (fd < 0 || copy_from_request(fd, f.len) != 0) end_call(1, "write", path);
    close(fd);
  }
  free(head);
  if (h.cwd_len && chdir(cwd) != 0) end_call(126, "chdir", cwd);
  uint32_t dict_len;
  if (!read_full(3, &dict_len, sizeof dict_len) || dict_len > 0x7fffffffu) {
    errno = EPROTO;
    setup_failed("request");
  }
  /* On top of what the worker has: what Python maps to read the rest (its bytes, the objects
   * made of them, a new arena of the allocator), as the address space measured after it did. */
  set_limits(&h, vm_bytes() + 2ull * dict_len + (1u << 20));
  return (int)dict_len;
}

/* ---- W, into Python: the rest of its request (the marshal'd dict) is read here and handed
 * to zygote.py's entry through the interpreter's C API, found with dlsym in the python3 that
 * loaded us (we are called with its lock held: ctypes.PyDLL). Returning through ctypes to
 * zygote.py and reading the dict there wrote ~20 pages more: the call's argument objects
 * freed, the result converted, the bytes read. Where the API is not found, warren_zygote()
 * returns the dict's length and Python reads it. */
typedef void* (*py_marshal_loads_fn)(const char*, long);
typedef void* (*py_call_fn)(void*, ...);
typedef void (*py_err_print_fn)(void);

static py_marshal_loads_fn g_py_loads;
static py_call_fn g_py_call;
static py_err_print_fn g_py_print_error;

/* In the zygote, once: every worker finds them in its copy. */
static void find_python_api(void) {
  g_py_loads = (py_marshal_loads_fn)dlsym(RTLD_DEFAULT, "PyMarshal_ReadObjectFromString");
  g_py_call = (py_call_fn)dlsym(RTLD_DEFAULT, "PyObject_CallFunctionObjArgs");
  g_py_print_error = (py_err_print_fn)dlsym(RTLD_DEFAULT, "PyErr_Print");
}

static void run_python_entry(void* entry, int dict_len) {
  if (!entry || !g_py_loads || !g_py_call || !g_py_print_error) return;
  char* buf = malloc(dict_len > 0 ? (size_t)dict_len : 1);
  if (!buf || !read_full(3, buf, (size_t)dict_len)) {
    errno = EPIPE;
    setup_failed("request");
  }
  close(3);
  void* req = g_py_loads(buf, dict_len);
  free(buf);
  if (req) g_py_call(entry, req, (void*)0); /* ends the worker: it does not come back */
  g_py_print_error(); /* an exception, as python3 would show one that nothing caught */
  _exit(1);
}

/* ---- The sample call (see learn_hot_pages below): in its worker, after its report on fd 4,
 * the list of the pages it wrote (sys/copy_at_clone.h). */
static volatile int g_probe; /* set in the sample call's worker only */

static void report_written_pages(void) {
  if (warren_send_written_pages(4) != 0) {
    write_report("{\"error\":\"list the written pages: %s\"}", strerror(errno));
    _exit(1);
  }
  _exit(0);
}

/* ---- W, its call over: zygote.py's run_python calls this once the program's own exit steps
 * (atexit, threads, its streams flushed) are done. Ends and reaps every other process of the
 * call (so the usage counts them all, and none still holding stdout keeps the result
 * waiting), closes the program's streams, reports `status` with the usage on fd 4 and waits
 * for the dispatcher, which reads the usage from /proc before it kills us. Never returns.
 * In C for the pages: os.kill, os.waitpid's ChildProcessError, getrusage's results and the
 * report's bytes each write some in a forked interpreter. */
__attribute__((visibility("default"))) void warren_worker_end(int status) {
  /* Every other process of the namespace descends from W (an orphan comes to W, or to a
   * subreaper below it): with no child of W's, ended or not, there is none, and the kill, which
   * walks every process on the host under the kernel's task-list lock, is not made. */
  if (!(waitpid(-1, NULL, WNOHANG | __WALL) < 0 && errno == ECHILD)) {
    kill(-1, SIGKILL);
    while (waitpid(-1, NULL, __WALL) >= 0 || errno == EINTR) {
    }
  }
  struct rusage me, kids;
  getrusage(RUSAGE_SELF, &me);
  getrusage(RUSAGE_CHILDREN, &kids);
  long long cpu_us = (long long)me.ru_utime.tv_sec * 1000000 + me.ru_utime.tv_usec +
                     (long long)me.ru_stime.tv_sec * 1000000 + me.ru_stime.tv_usec +
                     (long long)kids.ru_utime.tv_sec * 1000000 + kids.ru_utime.tv_usec +
                     (long long)kids.ru_stime.tv_sec * 1000000 + kids.ru_stime.tv_usec;
  long rss = me.ru_maxrss > kids.ru_maxrss ? me.ru_maxrss : kids.ru_maxrss;
  close(0);
  close(1);
  close(2);
  write_report("{\"exit_code\":%d,\"signal\":0,\"cpu_ms\":%lld,\"maxrss_kb\":%ld}", status,
               cpu_us / 1000, rss);
  if (g_probe) report_written_pages(); /* the zygote's sample call: see learn_hot_pages */
  close(4);
  struct timespec wait = {5, 0};
  while (nanosleep(&wait, &wait) != 0 && errno == EINTR) {
  }
  _exit(status);
}

/* ---- The zygote. */

/* Control data of a message: room for the most fds one carries (a request's five, and slack). */
typedef union {
  char buf[CMSG_SPACE(8 * sizeof(int))];
  struct cmsghdr align;
} wz_control;

static struct msghdr message(struct iovec* iov, wz_control* ctl, size_t ctl_len) {
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl_len ? ctl->buf : NULL;
  mh.msg_controllen = ctl_len;
  return mh;
}

static void send_msg(int sock, const char* msg, int fd) {
  struct iovec iov = {(void*)msg, strlen(msg)};
  wz_control u;
  struct msghdr mh = message(&iov, &u, fd >= 0 ? CMSG_SPACE(sizeof(int)) : 0);
  if (fd >= 0) {
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  while (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) _exit(0); /* the dispatcher is gone */
  }
}

/* ---- Net namespaces. A new one costs more than any other single step of a call (~14% of all
 * CPU with 2 clients: every pernet subsystem's init, sysctl tables, lo's registration, then
 * the same torn down in a kworker). Most calls never touch the network, so
 * a call's namespace is either new or one an earlier call left exactly as new: lo never
 * carried a packet and no socket of any kind is left in it. Nothing else in a net namespace
 * can be changed without CAP_NET_ADMIN, which no call has, but the SNMP counters (checked too). */

#define WZ_POOL 8
#define WZ_KIDS 256
static int g_self_netns = -1; /* the runner's, to come back to after a check */
static int g_pool[WZ_POOL], g_pool_n;
/* An IPC namespace with its probe (isolation/ipcns_pristine.h), kept as net namespaces are: a
 * new one costs its own mqueue superblock and, at its end, an expedited RCU grace period. */
struct wz_ipcns {
  int fd; /* -1: none */
  struct warren_ipcns_probe probe;
};
static int g_self_ipcns = -1;
static struct wz_ipcns g_ipc_pool[WZ_POOL];
static int g_ipc_pool_n;
static struct {
  pid_t pid;
  int netns;             /* its net namespace, to check and keep when it ends; -1: none kept */
  struct wz_ipcns ipcns; /* its IPC namespace, the same */
} g_kids[WZ_KIDS];

/* One for a worker: a kept one, or one made here (unshare and back, its probe opened in it),
 * or none (fd -1: the clone makes one, not kept). */
static struct wz_ipcns ipcns_take(void) {
  if (g_ipc_pool_n) return g_ipc_pool[--g_ipc_pool_n];
  struct wz_ipcns n = {.fd = -1};
  n.probe.mqueue = -1; /* nothing open until warren_ipcns_probe_open says otherwise */
  for (int i = 0; i < 3; i++) n.probe.next_id[i] = -1;
  if (g_self_ipcns < 0 || unshare(CLONE_NEWIPC) != 0) return n;
  n.fd = open("/proc/thread-self/ns/ipc", O_RDONLY | O_CLOEXEC);
  if (n.fd >= 0) warren_ipcns_probe_open(&n.probe);     /* all -1 where it fails: never kept */
  if (setns(g_self_ipcns, CLONE_NEWIPC) != 0) _exit(1); /* never clone into the wrong one */
  return n;
}

static void ipcns_release(struct wz_ipcns n) {
  warren_ipcns_probe_close(&n.probe);
  if (n.fd >= 0) close(n.fd);
}

/* A worker's, every process of its call gone: kept if it is as new, else let go. */
static void ipcns_give(struct wz_ipcns n) {
  if (n.fd >= 0 && g_ipc_pool_n < WZ_POOL && warren_ipcns_probe_pristine(&n.probe))
    g_ipc_pool[g_ipc_pool_n++] = n;
  else
    ipcns_release(n);
}

/* What the check reads of each namespace found as new (in the pool, or lent to a call), opened
 * once (isolation/netns_pristine.h), by the namespace's inode number: the open files keep it
 * alive, so the number names no other while they are here. Checked again, such a namespace is
 * read through them: no setns in and out, no open or close (~30 system calls a call fewer). A
 * worker closes them with everything above its pipes (place_fds). */
#define WZ_PROBES 32
static struct {
  ino_t ino; /* 0: a free slot */
  struct warren_netns_probe files;
} g_probes[WZ_PROBES];

static ino_t netns_ino(int netns) {
  struct stat st;
  return fstat(netns, &st) == 0 ? st.st_ino : 0;
}

static int probe_slot(ino_t ino) {
  for (int i = 0; i < WZ_PROBES; i++)
    if (g_probes[i].ino == ino) return i;
  return -1;
}

/* Keeps the files of the namespace the zygote is in now, which is `netns`. */
static void probe_keep(int netns, const struct warren_netns_probe* files) {
  const ino_t ino = netns_ino(netns);
  const int i = ino ? probe_slot(0) : -1;
  if (i < 0) { /* no room: it is checked the long way */
    struct warren_netns_probe f = *files;
    warren_netns_probe_close(&f);
    return;
  }
  g_probes[i].ino = ino;
  g_probes[i].files = *files;
}

/* A namespace the zygote lets go: its files go with it. */
static void netns_release(int netns) {
  const ino_t ino = netns_ino(netns);
  const int i = ino ? probe_slot(ino) : -1;
  if (i >= 0) {
    warren_netns_probe_close(&g_probes[i].files);
    g_probes[i].ino = 0;
  }
  close(netns);
}

static int netns_pristine(int netns) {
  const ino_t ino = netns_ino(netns);
  const int i = ino ? probe_slot(ino) : -1;
  if (i >= 0) return warren_netns_probe_pristine(&g_probes[i].files);
  if (g_self_netns < 0 || setns(netns, CLONE_NEWNET) != 0) return 0;
  struct warren_netns_probe files;
  const int opened = warren_netns_probe_open("/proc/self/net", &files) == 0;
  if (setns(g_self_netns, CLONE_NEWNET) != 0) _exit(1); /* never clone into the wrong one */
  if (!opened) return 0;
  const int ok = warren_netns_probe_pristine(&files);
  if (ok)
    probe_keep(netns, &files);
  else
    warren_netns_probe_close(&files);
  return ok;
}

static void kid_add(pid_t pid, int netns, struct wz_ipcns ipcns) {
  for (int i = 0; i < WZ_KIDS; i++)
    if (g_kids[i].pid == 0) {
      g_kids[i].pid = pid;
      g_kids[i].netns = netns;
      g_kids[i].ipcns = ipcns;
      return;
    }
  /* No room to track them: they go with its call. */
  if (netns >= 0) netns_release(netns);
  ipcns_release(ipcns);
}

/* A call's namespace, the call over: back to the pool if it is as new, else away. */
static void netns_recycle(int netns) {
  if (g_pool_n < WZ_POOL && netns_pristine(netns))
    g_pool[g_pool_n++] = netns;
  else
    netns_release(netns);
}

/* A call ended. */
static void kid_end(pid_t pid) {
  for (int i = 0; i < WZ_KIDS; i++) {
    if (g_kids[i].pid != pid) continue;
    int netns = g_kids[i].netns;
    g_kids[i].pid = 0;
    if (netns >= 0) netns_recycle(netns);
    ipcns_give(g_kids[i].ipcns);
    return;
  }
}

static void send_error(int sock, const char* what, int err) {
  char e[160];
  snprintf(e, sizeof e, "{\"error\":\"%s: %s\"}", what, strerror(err));
  send_msg(sock, e, -1);
}

/* One request: a fork ({"uid": N} with the worker's five pipe ends). Returns the uid with the
 * fds in `fds`, 0 after answering a malformed one itself, -1 on EINTR; ends the zygote when the
 * dispatcher is gone. */
static long recv_request(int sock, int* fds) {
  char msg[256];
  struct iovec iov = {msg, sizeof msg - 1};
  wz_control u;
  struct msghdr mh = message(&iov, &u, sizeof u.buf);
  ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  if (n < 0 && errno == EINTR) return -1;
  if (n <= 0) _exit(0); /* the dispatcher is gone */
  msg[n] = 0;
  int got[8], nfds = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k && nfds < 8; i++)
      memcpy(&got[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  }
  const char* u_at = strstr(msg, "\"uid\":");
  long uid = u_at ? strtol(u_at + 6, NULL, 10) : -1;
  if (nfds != WZ_FDS || uid <= 0 || (mh.msg_flags & MSG_CTRUNC)) {
    for (int i = 0; i < nfds; i++) close(got[i]);
    send_msg(sock, "{\"error\":\"clone: a bad fork request\"}", -1);
    return 0;
  }
  memcpy(fds, got, sizeof(int) * WZ_FDS);
  return uid;
}

/* Every ended child, as {"exited": pid, ...}: the dispatcher reuses a uid only after this. */
static void report_ends(int sock) {
  for (;;) {
    int status = 0;
    struct rusage ru;
    pid_t pid = wait4(-1, &status, WNOHANG, &ru);
    if (pid <= 0) return;
    kid_end(pid);
    long cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
                  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
    char msg[256];
    snprintf(msg, sizeof msg,
             "{\"exited\":%d,\"exit_code\":%d,\"signal\":%d,\"cpu_ms\":%ld,\"maxrss_kb\":%ld}",
             (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
             WIFSIGNALED(status) ? WTERMSIG(status) : 0, cpu_ms, ru.ru_maxrss);
    send_msg(sock, msg, -1);
  }
}

/* ---- Pages copied at the clone (sys/copy_at_clone.h). Most of a worker's page faults are
 * copies of pages it shares with the zygote, each ~14 us on a PVM guest, most of it the TLB
 * flush. Before any call is here, the zygote runs a sample call (`probe`, a request as the
 * dispatcher encodes one) in a worker made as every worker is, which lists the pages it wrote;
 * the zygote pins those it has, and every later clone gets its own copies at once. Returns how
 * many pages were pinned; 0 with `*why` set where none could be. */
struct wz_setup {
  const void* bpf;
  size_t bpf_len;
  unsigned long long tmp_bytes;
  unsigned flags;
  unsigned long root_flags;
};

/* The zygote's own pages that it writes at every clone and end: the loop's variables, and its
 * stack from the loop's frame (`frame`, a variable there) down through what the loop calls.
 * Shared with each new worker, each took a copy in the zygote right after the clone (3 a
 * clone here, with the flush that clears the shared entry on every CPU that ran the zygote),
 * on the path to the next clone; pinned, each is copied into the worker at the clone instead.
 * Returns how many pages are in `out`. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define WZ_STACK_PAGES 6
static size_t own_pages(const void* frame, uintptr_t* out, size_t cap) {
  const struct {
    const void* at;
    size_t len;
  } mine[] = {{g_pool, sizeof g_pool},         {&g_pool_n, sizeof g_pool_n},
              {g_ipc_pool, sizeof g_ipc_pool}, {&g_ipc_pool_n, sizeof g_ipc_pool_n},
              {g_kids, sizeof g_kids},         {g_probes, sizeof g_probes}};
  const uintptr_t page = 4096;
  size_t n = 0;
  for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) {
    const uintptr_t first = (uintptr_t)mine[i].at & ~(page - 1);
    const uintptr_t last = ((uintptr_t)mine[i].at + mine[i].len - 1) & ~(page - 1);
    for (uintptr_t p = first; p <= last && n < cap; p += page) out[n++] = p;
  }
  /* The frame may reach a page above its variable; the calls go down. */
  const uintptr_t top = ((uintptr_t)frame & ~(page - 1)) + page;
  for (uintptr_t k = 0; k < WZ_STACK_PAGES && n < cap; k++) out[n++] = top - k * page;
  /* Each made present now (a variable not yet written, a stack page not yet reached): only a
   * page the zygote has can be pinned. Writes nothing: a page present stays as it is. */
  for (size_t i = 0; i < n; i++) madvise((void*)out[i], page, MADV_POPULATE_WRITE);
  return n;
}

static long learn_hot_pages(const void* probe, size_t probe_len, unsigned uid,
                            const struct wz_setup* s, void* entry, const uintptr_t* own,
                            size_t nown, const char** why) {
  if (!probe_len || !uid || !entry || !g_py_loads || !g_py_call || !g_py_print_error) {
    *why = "no sample call";
    const long pinned = warren_copy_at_clone(own, nown); /* the zygote's own, at least */
    return pinned > 0 ? pinned : 0;
  }
  int p[WZ_FDS][2]; /* request, stdin, stdout, stderr, status: as the dispatcher's */
  int made = 0;
  for (; made < WZ_FDS; made++)
    if (pipe2(p[made], O_CLOEXEC) != 0) break;
  long pid = -1;
  if (made == WZ_FDS && probe_len <= 65536) { /* it fits the pipe: written before the clone */
    write_all(p[0][1], probe, probe_len);
    g_probe = 1;
    pid = syscall(SYS_clone,
                  CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | SIGCHLD,
                  0, 0, 0, 0);
    if (pid == 0) {
      const int theirs[WZ_FDS] = {p[0][0], p[1][0], p[2][1], p[3][1], p[4][1]};
      place_fds(theirs);
      worker_setup(uid, s->tmp_bytes, s->flags, s->root_flags, s->bpf, s->bpf_len);
      run_python_entry(entry, worker_request()); /* ends in report_written_pages */
      _exit(1);
    }
    g_probe = 0;
  }
  /* Ours: the read ends of its output (left unread in the pipes: it is a few bytes, and a
   * closed pipe would fail its writes) and of its status. */
  for (int i = 0; i < made; i++) {
    if (i < 2) close(p[i][0]);
    close(p[i][1]);
  }
  if (pid < 0) {
    for (int i = 2; i < made; i++) close(p[i][0]);
    *why = made < WZ_FDS ? "pipe" : "clone";
    return 0;
  }
  /* Its report frame, then the list: read until it ends (at most 10 s: it runs our code). */
  size_t cap = (65536 + 1) * sizeof(uint64_t) + 4096, len = 0; /* a list's most, a frame */
  char* buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct pollfd pf = {p[4][0], POLLIN, 0};
  while (buf != MAP_FAILED && len < cap) {
    int r = poll(&pf, 1, 10000);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = read(p[4][0], buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  for (int i = 2; i < WZ_FDS; i++) close(p[i][0]);
  kill((pid_t)pid, SIGKILL);
  while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR) {
  }
  long pinned = 0;
  uint32_t total = 0;
  if (buf == MAP_FAILED) {
    *why = "mmap";
    return 0;
  }
  if (len >= 4) memcpy(&total, buf, 4);
  const size_t at = 4 + (size_t)total; /* the list follows its report's frame */
  pinned = warren_copy_at_clone_from_list(buf + at, len > at ? len - at : 0, own, nown, why);
  if (pinned < 0) pinned = 0;
  munmap(buf, cap);
  return pinned;
}

/* Serves fork requests on `sock`; returns only in a new worker, set up and with the first part
 * of its request applied, the length of the rest (see above). Before it serves it runs the
 * sample call `probe` as uid `probe_uid` (see learn_hot_pages) and then says it is ready: the
 * JSON object `hello` (without its closing brace) with "copied_at_clone" added. */
__attribute__((visibility("default"))) int warren_zygote(int sock, const void* bpf, size_t bpf_len,
                                                         unsigned long long tmp_bytes,
                                                         unsigned flags, unsigned long root_flags,
                                                         void* entry, const char* hello,
                                                         const void* probe, size_t probe_len,
                                                         unsigned probe_uid) {
  const unsigned long clone_flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS;
  char loop_frame = 0; /* where this frame is: the stack the loop below writes (own_pages) */
  if (entry) find_python_api();
  g_self_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  g_self_ipcns = open("/proc/self/ns/ipc", O_RDONLY | O_CLOEXEC);
  flags = warren_call_prepare_root(flags, root_flags);
  if (flags & WARREN_CALL_ROOT_DONE) warren_call_detach_covered(flags);
  warren_code_to_huge_pages(); /* the interpreter's code: see sys/code_huge_pages.h */
  {
    const struct wz_setup s = {bpf, bpf_len, tmp_bytes, flags, root_flags};
    const char* why = "";
    uintptr_t own[64];
    const size_t nown = own_pages(&loop_frame, own, sizeof own / sizeof own[0]);
    const long hot = learn_hot_pages(probe, probe_len, probe_uid, &s, entry, own, nown, &why);
    char ready[4096];
    snprintf(ready, sizeof ready, "%s, \"copied_at_clone\": %ld, \"copy_at_clone_why\": \"%s\"}",
             hello, hot, why);
    send_msg(sock, ready, -1);
  }
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) _exit(1);
  int fl = fcntl(sock, F_GETFL);
  fcntl(sock, F_SETFL, fl & ~O_NONBLOCK);
  for (;;) {
    struct pollfd p[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (p[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      report_ends(sock);
    }
    if (!p[0].revents) continue;
    int fds[WZ_FDS];
    long uid = recv_request(sock, fds);
    if (uid <= 0) continue;
    int netns = g_pool_n ? g_pool[--g_pool_n] : -1;
    struct wz_ipcns ipcns = ipcns_take();
    long pid = syscall(
        SYS_clone,
        clone_flags | (netns < 0 ? CLONE_NEWNET : 0) | (ipcns.fd < 0 ? CLONE_NEWIPC : 0) | SIGCHLD,
        0, 0, 0, 0);
    if (pid == 0) {
      sigprocmask(SIG_SETMASK, &old, NULL);
      /* The zygote reports our end where either fails. */
      if (netns >= 0 && setns(netns, CLONE_NEWNET) != 0) _exit(1);
      if (ipcns.fd >= 0 && setns(ipcns.fd, CLONE_NEWIPC) != 0) _exit(1);
      place_fds(fds); /* closes sock, sfd and the pool's fds too */
      worker_setup((uid_t)uid, tmp_bytes, flags, root_flags, bpf, bpf_len);
      const int dict_len = worker_request();
      run_python_entry(entry, dict_len); /* returns only where the C API is not found */
      return dict_len;
    }
    int err = errno;
    for (int i = 0; i < WZ_FDS; i++) close(fds[i]);
    if (pid < 0) {
      if (netns >= 0) g_pool[g_pool_n++] = netns; /* popped above: there is room */
      ipcns_give(ipcns);                          /* no process was ever in it */
      send_error(sock, "clone", err);
      continue;
    }
    if (netns < 0 && g_self_netns >= 0) {
      char path[64];
      snprintf(path, sizeof path, "/proc/%ld/ns/net", pid);
      netns = open(path, O_RDONLY | O_CLOEXEC); /* -1 if it is gone already: not kept */
    }
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pidfd < 0) { /* the dispatcher could not end it: it must not run, and is gone before
                        the dispatcher hears of it (and reuses its uid) */
      int perr = errno;
      kill((pid_t)pid, SIGKILL);
      while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR) {
      }
      if (netns >= 0) netns_release(netns);
      ipcns_release(ipcns);
      send_error(sock, "pidfd_open", perr);
      continue;
    }
    kid_add((pid_t)pid, netns, ipcns);
    char ok[64];
    snprintf(ok, sizeof ok, "{\"pid\":%ld}", pid);
    send_msg(sock, ok, pidfd);
    close(pidfd);
  }
}
