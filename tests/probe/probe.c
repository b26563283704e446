/*
 * probe: print one JSON object describing what the calling process can reach.
 *
 * Runs inside a Warren sandbox (or anywhere else, as a baseline).  Dependency-free: only libc
 * and kernel headers.  Build:  gcc -static -O2 -o probe tests/probe/probe.c
 *
 * Every field is best effort: a value that cannot be read is JSON null (or, for syscalls,
 * a negative errno), never a crash.  Output is a single line of JSON on stdout.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif

/* ---- a tiny JSON writer on stdout ------------------------------------------------------ */

static int need_comma[64];
static int depth;

static void sep(void) {
  if (need_comma[depth]) putchar(',');
  need_comma[depth] = 1;
}

static void jstr_raw(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
      case '"':
        fputs("\\\"", stdout);
        break;
      case '\\':
        fputs("\\\\", stdout);
        break;
      case '\n':
        fputs("\\n", stdout);
        break;
      case '\r':
        fputs("\\r", stdout);
        break;
      case '\t':
        fputs("\\t", stdout);
        break;
      default:
        if (c < 0x20 || c >= 0x7f)
          printf("\\u%04x", c); /* bytes, not UTF-8: keep ASCII */
        else
          putchar(c);
    }
  }
  putchar('"');
}
static void jstr(const char *s) {
  if (!s) {
    fputs("null", stdout);
    return;
  }
  jstr_raw(s, strlen(s));
}
static void key(const char *k) {
  sep();
  jstr(k);
  putchar(':');
}
static void obj_open(void) {
  putchar('{');
  need_comma[++depth] = 0;
}
static void obj_close(void) {
  putchar('}');
  depth--;
}
static void arr_open(void) {
  putchar('[');
  need_comma[++depth] = 0;
}
static void arr_close(void) {
  putchar(']');
  depth--;
}
static void kv_str(const char *k, const char *v) {
  key(k);
  jstr(v);
}
static void kv_int(const char *k, long long v) {
  key(k);
  printf("%lld", v);
}
static void kv_null(const char *k) {
  key(k);
  fputs("null", stdout);
}
static void kv_bool(const char *k, int v) {
  key(k);
  fputs(v ? "true" : "false", stdout);
}
static void item_str(const char *v) {
  sep();
  jstr(v);
}

/* ---- helpers --------------------------------------------------------------------------- */

/* Read a whole (small, possibly size-0 procfs) file; NULL on error.  Caller frees. */
static char *slurp(const char *path, size_t max) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap + 1);
  if (!buf) {
    close(fd);
    return NULL;
  }
  for (;;) {
    if (len == cap) {
      if (cap >= max) break;
      cap *= 2;
      char *nb = realloc(buf, cap + 1);
      if (!nb) break;
      buf = nb;
    }
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fd);
  buf[len] = 0;
  return buf;
}

static void chomp(char *s) {
  if (!s) return;
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = 0;
}

/* Value of "Name:\t..." in /proc/self/status, trimmed; NULL if absent.  Static buffer. */
static const char *status_field(const char *status, const char *name) {
  static char out[256];
  if (!status) return NULL;
  size_t nl = strlen(name);
  for (const char *p = status; p && *p;) {
    if (!strncmp(p, name, nl) && p[nl] == ':') {
      p += nl + 1;
      while (*p == ' ' || *p == '\t') p++;
      size_t i = 0;
      while (*p && *p != '\n' && i + 1 < sizeof out) out[i++] = *p++;
      out[i] = 0;
      return out;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return NULL;
}

/* octal escapes in mountinfo (\040 for space) */
static void unescape(char *s) {
  char *w = s;
  for (char *r = s; *r;) {
    if (r[0] == '\\' && isdigit((unsigned char)r[1]) && isdigit((unsigned char)r[2]) &&
        isdigit((unsigned char)r[3])) {
      *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
      r += 4;
    } else {
      *w++ = *r++;
    }
  }
  *w = 0;
}

/* ---- sections -------------------------------------------------------------------------- */

static void ids(void) {
  kv_int("uid", getuid());
  kv_int("euid", geteuid());
  kv_int("gid", getgid());
  kv_int("egid", getegid());
  char *m = slurp("/proc/self/uid_map", 1 << 16);
  kv_str("uid_map", m);
  free(m);
  m = slurp("/proc/self/gid_map", 1 << 16);
  kv_str("gid_map", m);
  free(m);
  m = slurp("/proc/self/setgroups", 1 << 12);
  chomp(m);
  kv_str("setgroups", m);
  free(m);
  kv_int("pid", getpid());
  kv_int("ppid", getppid());
}

static void status_section(void) {
  char *st = slurp("/proc/self/status", 1 << 20);
  static const char *caps[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};
  for (size_t i = 0; i < sizeof caps / sizeof *caps; i++) {
    const char *v = status_field(st, caps[i]);
    if (v)
      kv_str(caps[i], v);
    else
      kv_null(caps[i]);
  }
  const char *v = status_field(st, "NoNewPrivs");
  if (v)
    kv_int("NoNewPrivs", atoll(v));
  else
    kv_null("NoNewPrivs");
  v = status_field(st, "Seccomp");
  if (v)
    kv_int("Seccomp", atoll(v));
  else
    kv_null("Seccomp");
  v = status_field(st, "Seccomp_filters");
  if (v)
    kv_int("Seccomp_filters", atoll(v));
  else
    kv_null("Seccomp_filters");
  free(st);
  kv_int("prctl_no_new_privs", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
  kv_int("prctl_dumpable", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  kv_int("landlock_abi", abi >= 0 ? abi : -errno);
}

static void host_section(void) {
  char h[256] = {0};
  if (gethostname(h, sizeof h - 1) == 0)
    kv_str("hostname", h);
  else
    kv_null("hostname");
  /* PID namespace view */
  DIR *d = opendir("/proc");
  long n = 0;
  key("pids");
  arr_open();
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      const char *p = e->d_name;
      if (!*p) continue;
      while (isdigit((unsigned char)*p)) p++;
      if (*p) continue;
      n++;
      if (n <= 256) {
        sep();
        printf("%s", e->d_name);
      }
    }
    closedir(d);
  }
  arr_close();
  kv_int("nprocs", n);
  char *c = slurp("/proc/1/comm", 256);
  chomp(c);
  kv_str("proc1_comm", c);
  free(c);
  c = slurp("/proc/1/cmdline", 4096);
  kv_str("proc1_cmdline0", c); /* first NUL-terminated word */
  free(c);
}

static void mounts_section(void) {
  char *mi = slurp("/proc/self/mountinfo", 1 << 22);
  key("mounts");
  arr_open();
  for (char *line = mi, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    /* id parent maj:min root mountpoint options [optional...] - fstype source superopts */
    char *f[8] = {0};
    int nf = 0;
    char *save = NULL, *dash = strstr(line, " - ");
    if (!dash) continue;
    *dash = 0;
    char *post = dash + 3;
    for (char *t = strtok_r(line, " ", &save); t && nf < 8; t = strtok_r(NULL, " ", &save))
      f[nf++] = t;
    if (nf < 6) continue;
    char *ps = NULL;
    char *fstype = strtok_r(post, " ", &ps);
    char *source = strtok_r(NULL, " ", &ps);
    char *super = strtok_r(NULL, " ", &ps);
    unescape(f[3]);
    unescape(f[4]);
    sep();
    obj_open();
    kv_str("mountpoint", f[4]);
    kv_str("root", f[3]);
    kv_str("fstype", fstype);
    kv_str("source", source);
    kv_str("options", f[5]);
    kv_str("super", super);
    obj_close();
  }
  arr_close();
  free(mi);
}

static void rlimits_section(void) {
  static const struct {
    const char *name;
    int res;
  } lims[] = {{"NOFILE", RLIMIT_NOFILE}, {"NPROC", RLIMIT_NPROC}, {"FSIZE", RLIMIT_FSIZE},
              {"AS", RLIMIT_AS},         {"CORE", RLIMIT_CORE},   {"MEMLOCK", RLIMIT_MEMLOCK},
              {"STACK", RLIMIT_STACK},   {"CPU", RLIMIT_CPU}};
  key("rlimits");
  obj_open();
  for (size_t i = 0; i < sizeof lims / sizeof *lims; i++) {
    struct rlimit rl;
    key(lims[i].name);
    if (getrlimit(lims[i].res, &rl) != 0) {
      fputs("null", stdout);
      continue;
    }
    obj_open();
    if (rl.rlim_cur == RLIM_INFINITY)
      kv_int("soft", -1);
    else
      kv_int("soft", (long long)rl.rlim_cur);
    if (rl.rlim_max == RLIM_INFINITY)
      kv_int("hard", -1);
    else
      kv_int("hard", (long long)rl.rlim_max);
    obj_close();
  }
  obj_close();
}

static void cgroup_section(void) {
  char *cg = slurp("/proc/self/cgroup", 1 << 16);
  key("cgroup");
  arr_open();
  for (char *line = cg, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    if (*line) item_str(line);
  }
  arr_close();
  free(cg);
}

static void dev_dir(const char *dir, int recurse) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(path, &sb) != 0) continue;
    const char *type = S_ISCHR(sb.st_mode)    ? "c"
                       : S_ISBLK(sb.st_mode)  ? "b"
                       : S_ISDIR(sb.st_mode)  ? "d"
                       : S_ISLNK(sb.st_mode)  ? "l"
                       : S_ISFIFO(sb.st_mode) ? "p"
                       : S_ISSOCK(sb.st_mode) ? "s"
                                              : "f";
    sep();
    obj_open();
    kv_str("name", path);
    kv_str("type", type);
    if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) {
      char mm[32];
      snprintf(mm, sizeof mm, "%u:%u", major(sb.st_rdev), minor(sb.st_rdev));
      kv_str("dev", mm);
    }
    kv_int("mode", sb.st_mode & 07777);
    if (S_ISLNK(sb.st_mode)) {
      char t[512];
      ssize_t n = readlink(path, t, sizeof t - 1);
      if (n >= 0) {
        t[n] = 0;
        kv_str("target", t);
      }
    }
    obj_close();
    if (recurse && S_ISDIR(sb.st_mode)) dev_dir(path, recurse - 1);
  }
  closedir(d);
}

/* Open descriptors (THREATS #2: a leaked host fd or cwd is an escape) and the cwd/root. */
static void fds_section(void) {
  key("fds");
  arr_open();
  DIR *d = opendir("/proc/self/fd");
  int self = d ? dirfd(d) : -1;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = atoi(e->d_name);
    if (fd == self) continue;
    char p[64], t[512];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, t, sizeof t - 1);
    t[n > 0 ? n : 0] = 0;
    sep();
    obj_open();
    kv_int("fd", fd);
    kv_str("target", t);
    obj_close();
  }
  if (d) closedir(d);
  arr_close();
  char cwd[512];
  ssize_t n = readlink("/proc/self/cwd", cwd, sizeof cwd - 1);
  cwd[n > 0 ? n : 0] = 0;
  kv_str("cwd", cwd);
  n = readlink("/proc/self/root", cwd, sizeof cwd - 1);
  cwd[n > 0 ? n : 0] = 0;
  kv_str("root", cwd);
}

static void net_section(void) {
  char *nd = slurp("/proc/net/dev", 1 << 20);
  key("interfaces");
  arr_open();
  int lineno = 0;
  for (char *line = nd, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    if (++lineno <= 2) continue; /* two header lines */
    char *colon = strchr(line, ':');
    if (!colon) continue;
    *colon = 0;
    while (*line == ' ') line++;
    item_str(line);
  }
  arr_close();
  free(nd);
  char *rt = slurp("/proc/net/route", 1 << 20);
  int def = 0, routes = 0;
  lineno = 0;
  for (char *line = rt, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    if (++lineno == 1) continue;
    char ifn[64];
    unsigned long dst, gw, mask;
    unsigned flags;
    if (sscanf(line, "%63s %lx %lx %x %*d %*d %*d %lx", ifn, &dst, &gw, &flags, &mask) == 5) {
      routes++;
      if (dst == 0 && mask == 0) def = 1;
    }
  }
  free(rt);
  kv_int("ipv4_routes", routes);
  /* IPv6 default route: destination ::/0 in /proc/net/ipv6_route */
  char *r6 = slurp("/proc/net/ipv6_route", 1 << 20);
  int def6 = 0, routes6 = 0;
  for (char *line = r6, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    char dst[40], dlen[3], ifn[64];
    if (sscanf(line, "%32s %2s %*s %*s %*s %*s %*s %*s %*s %63s", dst, dlen, ifn) == 3) {
      if (!strcmp(ifn, "lo")) continue; /* loopback's own local/multicast entries */
      routes6++;
      if (!strcmp(dlen, "00") && strspn(dst, "0") == 32) def6 = 1;
    }
  }
  free(r6);
  kv_int("ipv6_routes_non_lo", routes6);
  kv_bool("default_route", def || def6);
}

int main(void) {
  obj_open();
  ids();
  status_section();
  host_section();
  mounts_section();
  rlimits_section();
  cgroup_section();
  key("dev");
  arr_open();
  dev_dir("/dev", 1);
  arr_close();
  net_section();
  fds_section();
  obj_close();
  putchar('\n');
  fflush(stdout);
  return 0;
}
