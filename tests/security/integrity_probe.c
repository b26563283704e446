/*
 * integrity_probe: attempts by a root occupant to change files it must not change (a tool
 * layer's files, a tree a filesystem policy made read-only), and the reads that tell whether a
 * change happened.  Run inside sandboxes by tests/security/test_integrity.py.
 *
 *   gcc -static -O2 -o integrity_probe tests/security/integrity_probe.c
 *   integrity_probe CMD ARGS... [-- CMD ARGS...]...
 *
 * Every step of a command prints one JSON object on its own line:
 *   {"op": "rename", "path": "/a", "to": "/b", "ret": -1, "errno": "EBUSY"}
 * ("ret" is the system call's return value, >= 0 when it worked; "errno" the error's name, ""
 * on success), and every command ends with a summary line:
 *   {"op": "end", "cmd": "linkover", "ok": false, "failed_op": "rename", "errno": "EBUSY"}
 * "ok" is true when every step worked; a command stops at its first failed step.  Commands
 * separated by "--" run one after the other in one process, whatever the outcome of each.
 *
 * Commands that change things:
 *   write PATH DATA             open(O_WRONLY|O_TRUNC), write
 *   append PATH DATA            open(O_WRONLY|O_APPEND), write
 *   create PATH DATA            open(O_WRONLY|O_CREAT|O_EXCL, 0755), write
 *   createhex HEXPATH DATA      create, the path given in hex (names that are not UTF-8)
 *   truncate PATH LEN           truncate(2)
 *   chmod PATH OCTAL            chmod(2)
 *   chown PATH UID GID          lchown(2)
 *   setxattr PATH NAME VALUE    lsetxattr(2)
 *   utimes PATH                 utimensat(2) to 2001-09-09 (1e9 s), no follow
 *   unlink PATH | rmdir PATH | mkdir PATH
 *   symlink TARGET PATH
 *   rename FROM TO | exchange A B (renameat2 RENAME_EXCHANGE) | link FROM TO
 *   linkover FAKE TARGET        link(FAKE, TARGET.lnk.PID), rename(TARGET.lnk.PID, TARGET)
 *   symlinkover DEST TARGET     symlink(DEST, TARGET.sl.PID), rename(TARGET.sl.PID, TARGET)
 *   tmpfile DIR TARGET DATA     open(DIR, O_TMPFILE|O_RDWR), write, linkat through
 *                               /proc/self/fd/N to TARGET.tmpf.PID, rename that over TARGET
 *   setflags PATH set|clear HEX FS_IOC_GETFLAGS, then FS_IOC_SETFLAGS with the bits set or cleared
 *   mount-over PATH SRC         mount tmpfs on PATH, bind SRC on PATH, umount PATH,
 *                               open_tree(SRC)+move_mount onto PATH, fsopen (each reported;
 *                               the summary is "ok" if any worked)
 *   hold FILE DIR READY GO [ROFILE [MAPFILE]]
 *                               opens ROFILE O_RDONLY, maps MAPFILE MAP_SHARED writable and
 *                               closes its fd, opens FILE O_RDWR and maps it MAP_SHARED
 *                               writable, opens DIR and makes it the cwd, creates READY, waits
 *                               (<= 90 s) for GO to exist, then writes through the fd, the
 *                               mappings and reopens of /proc/self/fd/N (of FILE and ROFILE) for
 *                               writing, fchmods ROFILE and DIR through their fds, creates and
 *                               removes entries through the cwd and the directory fd
 *                               (DIR/victim must exist)
 * Commands that read:
 *   stat PATH...                type, mode, owner, size, mtime, inode flags, xattr names and
 *                               the contents (hex; a symlink's target; a directory's names)
 *   statvfs PATH                whether the mount holding PATH is read-only
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#define SYS_move_mount 429
#define SYS_fsopen 430
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* ---- output ---------------------------------------------------------------------------- */

static const char *ename(int e) {
  static char buf[32];
  const char *n = strerrorname_np(e);
  if (n) return n;
  snprintf(buf, sizeof buf, "E%d", e);
  return buf;
}

static void jstr(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      fputs("\\n", stdout);
    else if (c < 0x20 || c >= 0x7f)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* The state of the command being run: its name, whether every step worked so far. */
static const char *g_cmd;
static int g_ok;
static const char *g_failed_op;
static int g_failed_errno;

/* One step: {"op", "path", ["to"], "ret", "errno"}; returns ret. */
static long step(const char *op, const char *path, const char *to, long ret, int err) {
  printf("{\"op\": ");
  jstr(op);
  if (path) {
    printf(", \"path\": ");
    jstr(path);
  }
  if (to) {
    printf(", \"to\": ");
    jstr(to);
  }
  printf(", \"ret\": %ld, \"errno\": \"%s\"}\n", ret, ret < 0 ? ename(err) : "");
  fflush(stdout);
  if (ret < 0 && g_ok) {
    g_ok = 0;
    g_failed_op = op;
    g_failed_errno = err;
  }
  return ret;
}

#define STEP(op, path, to, expr)   \
  ({                               \
    errno = 0;                     \
    long r_ = (long)(expr);        \
    step(op, path, to, r_, errno); \
  })

static void end_cmd(void) {
  printf("{\"op\": \"end\", \"cmd\": ");
  jstr(g_cmd);
  printf(", \"ok\": %s", g_ok ? "true" : "false");
  if (!g_ok) {
    printf(", \"failed_op\": ");
    jstr(g_failed_op);
    printf(", \"errno\": \"%s\"", ename(g_failed_errno));
  }
  printf("}\n");
  fflush(stdout);
}

/* a + b + "." + pid: a temporary name of this process's own beside `a`. */
static char *cat2(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 32;
  char *s = malloc(n);
  snprintf(s, n, "%s%s.%d", a, b, (int)getpid());
  return s;
}

static int need(int argc, int n) {
  if (argc < n) {
    fprintf(stderr, "integrity_probe %s: needs %d arguments\n", g_cmd, n - 1);
    step("usage", NULL, NULL, -1, EINVAL);
    return 0;
  }
  return 1;
}

/* ---- changing commands --------------------------------------------------------------------- */

static void write_all(const char *op, const char *path, int fd, const char *data) {
  STEP(op, path, NULL, write(fd, data, strlen(data)));
}

static void c_open_write(const char *path, int flags, const char *data) {
  int fd = STEP("open", path, NULL, open(path, flags | O_CLOEXEC, 0755));
  if (fd < 0) return;
  write_all("write", path, fd, data);
  STEP("close", path, NULL, close(fd));
}

static void c_tmpfile(const char *dir, const char *target, const char *data) {
  int fd = STEP("open_tmpfile", dir, NULL, open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0755));
  if (fd < 0) return;
  write_all("write", dir, fd, data);
  if (!g_ok) return;
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  char *tmp = cat2(target, ".tmpf");
  if (STEP("linkat", proc, tmp, linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW)) < 0) {
    close(fd);
    return;
  }
  STEP("rename", tmp, target, rename(tmp, target));
  close(fd);
}

static void c_setflags(const char *path, const char *how, const char *hex) {
  unsigned long mask = strtoul(hex, NULL, 16);
  int fd = STEP("open", path, NULL, open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW));
  if (fd < 0) return;
  int flags = 0;
  /* Where the flags cannot be read (a layer's file), set them anyway: the attempt is the
   * SETFLAGS, which alone decides the summary. */
  if (STEP("getflags", path, NULL, ioctl(fd, FS_IOC_GETFLAGS, &flags)) < 0) {
    flags = 0;
    g_ok = 1;
  }
  int nf = strcmp(how, "clear") == 0 ? (int)(flags & ~mask) : (int)(flags | mask);
  STEP("setflags", path, NULL, ioctl(fd, FS_IOC_SETFLAGS, &nf));
  close(fd);
}

static void c_mount_over(const char *path, const char *src) {
  int any = 0;
  long r;
  r = STEP("mount_tmpfs", path, NULL, mount("tmpfs", path, "tmpfs", 0, "size=1m"));
  any |= r >= 0;
  r = STEP("mount_bind", src, path, mount(src, path, NULL, MS_BIND, NULL));
  any |= r >= 0;
  r = STEP("umount", path, NULL, umount2(path, MNT_DETACH));
  any |= r >= 0;
  long t = STEP("open_tree", src, NULL,
                syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | O_CLOEXEC));
  any |= t >= 0;
  if (t >= 0) {
    r = STEP("move_mount", src, path,
             syscall(SYS_move_mount, (int)t, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH));
    any |= r >= 0;
  }
  r = STEP("fsopen", "tmpfs", NULL, syscall(SYS_fsopen, "tmpfs", 0));
  any |= r >= 0;
  /* "ok" here: some way to mount or unmount worked. */
  g_ok = any;
  if (!any) {
    g_failed_op = "mount";
    g_failed_errno = EPERM;
  }
}

static int exists(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0;
}

static void c_hold(const char *file, const char *dir, const char *ready, const char *go,
                   const char *rofile, const char *mapfile) {
  int rofd = -1;
  if (rofile) rofd = STEP("open_rdonly", rofile, NULL, open(rofile, O_RDONLY | O_CLOEXEC));
  /* A mapping alone: its descriptor is closed before the change. */
  char *map2 = MAP_FAILED;
  size_t len2 = 0;
  if (mapfile) {
    int mfd = STEP("open_mapfile", mapfile, NULL, open(mapfile, O_RDWR | O_CLOEXEC));
    struct stat mst;
    if (mfd >= 0 && fstat(mfd, &mst) == 0) {
      len2 = mst.st_size > 0 ? (size_t)mst.st_size : 1;
      map2 = mmap(NULL, len2, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
      STEP("mmap_only", mapfile, NULL, map2 == MAP_FAILED ? -1 : 0);
      close(mfd);
    }
  }
  int fd = STEP("open_rdwr", file, NULL, open(file, O_RDWR | O_CLOEXEC));
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return;
  size_t len = st.st_size > 0 ? (size_t)st.st_size : 1;
  char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  STEP("mmap_shared", file, NULL, map == MAP_FAILED ? -1 : 0);
  int dfd = STEP("open_dir", dir, NULL, open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  STEP("chdir", dir, NULL, chdir(dir));
  int r = STEP("ready", ready, NULL, open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (r >= 0) close(r);
  int waited = 0;
  while (!exists(go) && waited < 90 * 50) {
    usleep(20000);
    waited++;
  }
  STEP("go", go, NULL, exists(go) ? 0 : -1);
  /* Every attempt from here is reported; the test decides which must fail and checks what a
   * new process sees. */
  g_ok = 1;
  STEP("fd_pwrite", file, NULL, pwrite(fd, "HACKED-FD", 9, 0));
  if (map != MAP_FAILED) {
    memcpy(map, "HACKED-MM", len < 9 ? len : 9);
    STEP("mmap_write", file, NULL, msync(map, len, MS_SYNC));
  }
  if (map2 != MAP_FAILED) {
    memcpy(map2, "HACKED-M2", len2 < 9 ? len2 : 9);
    STEP("mmap_only_write", mapfile, NULL, msync(map2, len2, MS_SYNC));
  }
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  int pfd = STEP("proc_reopen", proc, NULL, open(proc, O_RDWR | O_CLOEXEC));
  if (pfd >= 0) {
    STEP("proc_reopen_write", proc, NULL, pwrite(pfd, "HACKED-PR", 9, 0));
    close(pfd);
  }
  if (rofd >= 0) {
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", rofd);
    pfd = STEP("proc_reopen_ro", proc, NULL, open(proc, O_RDWR | O_CLOEXEC));
    if (pfd >= 0) {
      STEP("proc_reopen_ro_write", proc, NULL, pwrite(pfd, "HACKED-RO", 9, 0));
      close(pfd);
    }
  }
  if (rofd >= 0) STEP("ro_fchmod", rofile, NULL, fchmod(rofd, 0777));
  if (dfd >= 0) STEP("dirfd_fchmod", dir, NULL, fchmod(dfd, 0777));
  int c =
      STEP("cwd_create", "cwd-new", NULL, open("cwd-new", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (c >= 0) close(c);
  if (dfd >= 0) {
    c = STEP("dirfd_create", "dirfd-new", NULL,
             openat(dfd, "dirfd-new", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (c >= 0) close(c);
    STEP("dirfd_mkdir", "dirfd-dir", NULL, mkdirat(dfd, "dirfd-dir", 0755));
    STEP("dirfd_rename", "victim", "victim2", renameat(dfd, "victim", dfd, "victim2"));
  }
  STEP("cwd_unlink", "victim", NULL, unlink("victim"));
  STEP("fd_ftruncate", file, NULL, ftruncate(fd, 0));
  g_ok = 1; /* the summary of hold says nothing; the lines do */
}

/* ---- reading commands ---------------------------------------------------------------------- */

static int cmpstr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void c_stat(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    step("stat", path, NULL, -1, errno);
    return;
  }
  const char *type = S_ISREG(st.st_mode)   ? "file"
                     : S_ISDIR(st.st_mode) ? "dir"
                     : S_ISLNK(st.st_mode) ? "symlink"
                                           : "other";
  printf("{\"op\": \"stat\", \"path\": ");
  jstr(path);
  printf(
      ", \"ret\": 0, \"errno\": \"\", \"type\": \"%s\", \"mode\": %u, \"uid\": %u, \"gid\": %u, "
      "\"size\": %lld, "
      "\"mtime\": \"%lld.%09ld\", \"ino\": %llu, \"nlink\": %lu",
      type, st.st_mode & 07777, st.st_uid, st.st_gid, (long long)st.st_size,
      (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)st.st_ino,
      (unsigned long)st.st_nlink);
  /* inode flags */
  int flags = 0, fd = -1;
  if (!S_ISLNK(st.st_mode)) fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0)
    printf(", \"flags\": %d", flags);
  else
    printf(", \"flags\": null");
  /* xattr names, sorted */
  char names[8192];
  ssize_t n = llistxattr(path, names, sizeof names);
  printf(", \"xattrs\": [");
  if (n > 0) {
    char *v[256];
    int k = 0;
    for (ssize_t i = 0; i < n && k < 256; i += (ssize_t)strlen(names + i) + 1) v[k++] = names + i;
    qsort(v, k, sizeof v[0], cmpstr);
    for (int i = 0; i < k; i++) {
      if (i) printf(", ");
      jstr(v[i]);
    }
  }
  printf("]");
  /* contents */
  printf(", \"data\": ");
  if (S_ISREG(st.st_mode) && fd >= 0) {
    putchar('"');
    unsigned char buf[4096];
    ssize_t got;
    size_t total = 0;
    while ((got = read(fd, buf, sizeof buf)) > 0 && total < (1 << 20)) {
      for (ssize_t i = 0; i < got; i++) printf("%02x", buf[i]);
      total += (size_t)got;
    }
    putchar('"');
  } else if (S_ISLNK(st.st_mode)) {
    char t[4096];
    ssize_t l = readlink(path, t, sizeof t - 1);
    t[l > 0 ? l : 0] = 0;
    jstr(t);
  } else if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    char *v[4096];
    int k = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && k < 4096)
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) v[k++] = strdup(e->d_name);
    if (d) closedir(d);
    qsort(v, k, sizeof v[0], cmpstr);
    putchar('[');
    for (int i = 0; i < k; i++) {
      if (i) printf(", ");
      jstr(v[i]);
    }
    putchar(']');
  } else {
    printf("null");
  }
  if (fd >= 0) close(fd);
  printf("}\n");
  fflush(stdout);
}

static void c_statvfs(const char *path) {
  struct statvfs sv;
  int r = statvfs(path, &sv);
  int err = errno;
  printf("{\"op\": \"statvfs\", \"path\": ");
  jstr(path);
  printf(", \"ret\": %d, \"errno\": \"%s\", \"rdonly\": %s}\n", r, r < 0 ? ename(err) : "",
         r == 0 && (sv.f_flag & ST_RDONLY) ? "true" : "false");
  fflush(stdout);
}

static char *unhex(const char *h) {
  size_t n = strlen(h) / 2;
  char *s = malloc(n + 1);
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    sscanf(h + 2 * i, "%2x", &v);
    s[i] = (char)v;
  }
  s[n] = 0;
  return s;
}

/* ---- dispatch -------------------------------------------------------------------------- */

static void run(int argc, char **argv) {
  g_cmd = argv[0];
  g_ok = 1;
  g_failed_op = "";
  g_failed_errno = 0;
  const char *c = argv[0];
  if (!strcmp(c, "write")) {
    if (need(argc, 3)) c_open_write(argv[1], O_WRONLY | O_TRUNC, argv[2]);
  } else if (!strcmp(c, "append")) {
    if (need(argc, 3)) c_open_write(argv[1], O_WRONLY | O_APPEND, argv[2]);
  } else if (!strcmp(c, "create")) {
    if (need(argc, 3)) c_open_write(argv[1], O_WRONLY | O_CREAT | O_EXCL, argv[2]);
  } else if (!strcmp(c, "createhex")) {
    if (need(argc, 3)) c_open_write(unhex(argv[1]), O_WRONLY | O_CREAT | O_EXCL, argv[2]);
  } else if (!strcmp(c, "truncate")) {
    if (need(argc, 3)) STEP("truncate", argv[1], NULL, truncate(argv[1], atol(argv[2])));
  } else if (!strcmp(c, "chmod")) {
    if (need(argc, 3))
      STEP("chmod", argv[1], NULL, chmod(argv[1], (mode_t)strtoul(argv[2], NULL, 8)));
  } else if (!strcmp(c, "chown")) {
    if (need(argc, 4)) STEP("chown", argv[1], NULL, lchown(argv[1], atoi(argv[2]), atoi(argv[3])));
  } else if (!strcmp(c, "setxattr")) {
    if (need(argc, 4))
      STEP("setxattr", argv[1], NULL, lsetxattr(argv[1], argv[2], argv[3], strlen(argv[3]), 0));
  } else if (!strcmp(c, "utimes")) {
    struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
    if (need(argc, 2))
      STEP("utimes", argv[1], NULL, utimensat(AT_FDCWD, argv[1], ts, AT_SYMLINK_NOFOLLOW));
  } else if (!strcmp(c, "unlink")) {
    if (need(argc, 2)) STEP("unlink", argv[1], NULL, unlink(argv[1]));
  } else if (!strcmp(c, "rmdir")) {
    if (need(argc, 2)) STEP("rmdir", argv[1], NULL, rmdir(argv[1]));
  } else if (!strcmp(c, "mkdir")) {
    if (need(argc, 2)) STEP("mkdir", argv[1], NULL, mkdir(argv[1], 0755));
  } else if (!strcmp(c, "symlink")) {
    if (need(argc, 3)) STEP("symlink", argv[2], argv[1], symlink(argv[1], argv[2]));
  } else if (!strcmp(c, "rename")) {
    if (need(argc, 3)) STEP("rename", argv[1], argv[2], rename(argv[1], argv[2]));
  } else if (!strcmp(c, "exchange")) {
    if (need(argc, 3))
      STEP("exchange", argv[1], argv[2],
           syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE));
  } else if (!strcmp(c, "link")) {
    if (need(argc, 3)) STEP("link", argv[1], argv[2], link(argv[1], argv[2]));
  } else if (!strcmp(c, "linkover")) {
    if (need(argc, 3)) {
      char *tmp = cat2(argv[2], ".lnk");
      if (STEP("link", argv[1], tmp, link(argv[1], tmp)) >= 0)
        STEP("rename", tmp, argv[2], rename(tmp, argv[2]));
    }
  } else if (!strcmp(c, "symlinkover")) {
    if (need(argc, 3)) {
      char *tmp = cat2(argv[2], ".sl");
      if (STEP("symlink", tmp, argv[1], symlink(argv[1], tmp)) >= 0)
        STEP("rename", tmp, argv[2], rename(tmp, argv[2]));
    }
  } else if (!strcmp(c, "tmpfile")) {
    if (need(argc, 4)) c_tmpfile(argv[1], argv[2], argv[3]);
  } else if (!strcmp(c, "setflags")) {
    if (need(argc, 4)) c_setflags(argv[1], argv[2], argv[3]);
  } else if (!strcmp(c, "mount-over")) {
    if (need(argc, 3)) c_mount_over(argv[1], argv[2]);
  } else if (!strcmp(c, "hold")) {
    if (need(argc, 5))
      c_hold(argv[1], argv[2], argv[3], argv[4], argc > 5 ? argv[5] : NULL,
             argc > 6 ? argv[6] : NULL);
  } else if (!strcmp(c, "stat")) {
    for (int i = 1; i < argc; i++) c_stat(argv[i]);
  } else if (!strcmp(c, "statvfs")) {
    if (need(argc, 2)) c_statvfs(argv[1]);
  } else {
    fprintf(stderr, "integrity_probe: unknown command %s\n", c);
    step("unknown", c, NULL, -1, EINVAL);
  }
  end_cmd();
}

int main(int argc, char **argv) {
  int i = 1;
  while (i < argc) {
    int j = i;
    while (j < argc && strcmp(argv[j], "--") != 0) j++;
    if (j > i) run(j - i, argv + i);
    i = j + 1;
  }
  return 0;
}
