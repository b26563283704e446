#include "isolation/netns_pristine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { P_DEV, P_SOCKSTAT, P_SOCKSTAT6, P_FLOWLABEL, P_SNMP, P_SNMP6, P_UNIX };
static const char* const kProbeFiles[WARREN_NETNS_PROBE_FILES] = {
    "dev", "sockstat", "sockstat6", "ip6_flowlabel", "snmp", "snmp6", "unix"};

int warren_netns_probe_open(const char* proc_net, struct warren_netns_probe* probe) {
  int dir = open(proc_net, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  for (int i = 0; i < WARREN_NETNS_PROBE_FILES; i++) {
    probe->fd[i] = openat(dir, kProbeFiles[i], O_RDONLY | O_CLOEXEC);
    const int ipv6 = i == P_SOCKSTAT6 || i == P_FLOWLABEL || i == P_SNMP6;
    if (probe->fd[i] < 0 && !(ipv6 && errno == ENOENT)) {
      for (int j = 0; j < i; j++)
        if (probe->fd[j] >= 0) close(probe->fd[j]);
      close(dir);
      return -1;
    }
  }
  close(dir);
  return 0;
}

void warren_netns_probe_close(struct warren_netns_probe* probe) {
  for (int i = 0; i < WARREN_NETNS_PROBE_FILES; i++) {
    if (probe->fd[i] >= 0) close(probe->fd[i]);
    probe->fd[i] = -1;
  }
}

/* A probe file read from its start with one pread, NUL-terminated; its length, or -1 if it
 * cannot be read or fills `cap` - 1 bytes (more than a namespace as new shows). One read is
 * the whole file when it comes back shorter than asked: a single-record seq file (snmp, snmp6,
 * sockstat, sockstat6) shows all of itself at once, and a file of records (dev, unix,
 * ip6_flowlabel) shows at least its header and first records, a page of them, where any record
 * beyond what a new namespace has already says it is not. The read at the end that would return
 * 0 costs a system call of its own (~3.5 us here, 7 a check). */
static int read_whole(int fd, char* buf, size_t cap) {
  ssize_t n;
  do n = pread(fd, buf, cap - 1, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0 || (size_t)n >= cap - 1) return -1;
  buf[n] = 0;
  return (int)n;
}

/* Every number after `key` in `text` is 0. */
static int all_zero_after(const char* text, const char* key) {
  for (const char* p = strstr(text, key); p; p = strstr(p + 1, key))
    if (strtoul(p + strlen(key), NULL, 10) != 0) return 0;
  return 1;
}

/* The namespace's own settings among its SNMP figures (the same in every new namespace). */
static int snmp_setting(const char* name) {
  static const char* const settings[] = {"Forwarding", "DefaultTTL", "RtoAlgorithm", "RtoMin",
                                         "RtoMax",     "MaxConn",    "ifIndex"};
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
    if (strcmp(name, settings[i]) == 0) return 1;
  return 0;
}

/* Every counter of a /proc/net SNMP table is 0. `paired`: lines come in pairs, "Tcp: names..."
 * then "Tcp: values..." (snmp, netstat); else one "name value" a line (snmp6, dev_snmp6). A
 * counter a call moved (packets it tried to send nowhere, say) would tell a later occupant of it:
 * lo's own counters and the socket counts do not show those. Absent (no IPv6): nothing to tell. */
static int snmp_all_zero(int fd, int paired, char* buf, size_t cap) {
  if (fd < 0) return 1;
  if (read_whole(fd, buf, cap) < 0) return 0;
  char* save = NULL;
  char* names = NULL;
  for (char* line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (!paired) { /* "name   value": the value is the line's last word (scanned from its end: ~90
                      lines) */
      char* end = line + strlen(line);
      while (end > line && (end[-1] == ' ' || end[-1] == '\t')) end--;
      char* v = end;
      while (v > line && v[-1] != ' ' && v[-1] != '\t') v--;
      if (end - v == 1 && *v == '0') continue;
      char* name_end = line;
      while (*name_end && *name_end != ' ' && *name_end != '\t') name_end++;
      *name_end = 0;
      if (!snmp_setting(line)) return 0;
      continue;
    }
    if (!names) { /* a header: its values follow */
      names = line;
      continue;
    }
    char *ns = NULL, *vs = NULL;
    char* n = strtok_r(names, " ", &ns);
    char* v = strtok_r(line, " ", &vs); /* the "Tcp:" of both */
    for (n = strtok_r(NULL, " ", &ns), v = strtok_r(NULL, " ", &vs); n && v;
         n = strtok_r(NULL, " ", &ns), v = strtok_r(NULL, " ", &vs))
      if (strcmp(v, "0") != 0 && !snmp_setting(n)) return 0;
    names = NULL;
  }
  return 1;
}

int warren_netns_pristine(const char* proc_net) {
  struct warren_netns_probe probe;
  if (warren_netns_probe_open(proc_net, &probe) != 0) return 0;
  const int ok = warren_netns_probe_pristine(&probe);
  warren_netns_probe_close(&probe);
  return ok;
}

int warren_netns_probe_pristine(const struct warren_netns_probe* probe) {
  const int* fd = probe->fd;
  /* One buffer for every file, the largest being snmp6 (~90 lines, 3.4 KiB on Linux 6.18): a
   * file that outgrows it is not pristine, and the namespace is not lent again. The zygote
   * keeps this much of its stack copied at each clone (zygote_lib.c, own_pages). */
  char buf[8192];
  /* lo: every counter 0 (bytes, packets, errors, drops... both ways). */
  if (read_whole(fd[P_DEV], buf, sizeof buf) < 0) return 0;
  const char* lo = strstr(buf, "lo:");
  if (!lo) return 0;
  const char* end = strchr(lo, '\n');
  char* q = (char*)lo + 3;
  for (int i = 0; i < 16; i++) {
    char* next;
    unsigned long v = strtoul(q, &next, 10);
    if (next == q || v != 0 || (end && next > end)) return 0;
    q = next;
  }
  if (strchr(lo + 3, ':') || lo + 2 != strchr(buf, ':'))
    return 0; /* another device: never lo alone */
  /* No socket of any family ("sockets: used" counts them all in this namespace), none of TCP,
   * UDP, raw or fragments (v4 and v6) in use or in time-wait, and no AF_UNIX one (a socket
   * kept alive by its own fds in flight outlives every process). */
  if (read_whole(fd[P_SOCKSTAT], buf, sizeof buf) < 0 || !strstr(buf, "sockets: used ") ||
      !all_zero_after(buf, "sockets: used ") || !all_zero_after(buf, " inuse ") ||
      !all_zero_after(buf, " tw "))
    return 0;
  if (fd[P_SOCKSTAT6] >= 0 &&
      (read_whole(fd[P_SOCKSTAT6], buf, sizeof buf) < 0 || !all_zero_after(buf, " inuse ")))
    return 0;
  /* IPv6 flow labels outlive their socket (up to a linger the call chose) and carry 20 bits
   * and an address a later call can read. Without IPv6 there are none, and no sockstat6. */
  if (fd[P_FLOWLABEL] >= 0) {
    if (read_whole(fd[P_FLOWLABEL], buf, sizeof buf) < 0) return 0;
    char* nl = strchr(buf, '\n');
    if (!nl || nl[1] != 0) return 0;
  } else if (fd[P_SOCKSTAT6] >= 0) {
    return 0;
  }
  /* netstat's and lo's own IPv6 counters move only with packets, which lo's counters show. */
  if (!snmp_all_zero(fd[P_SNMP], 1, buf, sizeof buf)) return 0;
  if (!snmp_all_zero(fd[P_SNMP6], 0, buf, sizeof buf)) return 0;
  if (read_whole(fd[P_UNIX], buf, sizeof buf) < 0) return 0;
  char* nl = strchr(buf, '\n');
  return nl && nl[1] == 0; /* the header line alone */
}
