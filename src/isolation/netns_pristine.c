#include "isolation/netns_pristine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sys/small_file.h"

/* `dir`/`name` into `out` (which holds 256 bytes). */
static const char* in_dir(char* out, const char* dir, const char* name) {
  snprintf(out, 256, "%s/%s", dir, name);
  return out;
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
static int snmp_all_zero(const char* path, int paired) {
  char buf[32768]; /* snmp6: ~90 lines */
  if (warren_read_small_file(path, buf, sizeof buf) < 0) return access(path, F_OK) != 0;
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
  char buf[4096], path[256];
  /* lo: every counter 0 (bytes, packets, errors, drops... both ways). */
  if (warren_read_small_file(in_dir(path, proc_net, "dev"), buf, sizeof buf) < 0) return 0;
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
  if (warren_read_small_file(in_dir(path, proc_net, "sockstat"), buf, sizeof buf) < 0 ||
      !strstr(buf, "sockets: used ") || !all_zero_after(buf, "sockets: used ") ||
      !all_zero_after(buf, " inuse ") || !all_zero_after(buf, " tw "))
    return 0;
  if (warren_read_small_file(in_dir(path, proc_net, "sockstat6"), buf, sizeof buf) >= 0 &&
      !all_zero_after(buf, " inuse "))
    return 0;
  /* IPv6 flow labels outlive their socket (up to a linger the call chose) and carry 20 bits
   * and an address a later call can read. Without IPv6 there are none, and no sockstat6. */
  if (warren_read_small_file(in_dir(path, proc_net, "ip6_flowlabel"), buf, sizeof buf) >= 0) {
    char* nl = strchr(buf, '\n');
    if (!nl || nl[1] != 0) return 0;
  } else if (access(in_dir(path, proc_net, "sockstat6"), F_OK) == 0) {
    return 0;
  }
  /* netstat's and lo's own IPv6 counters move only with packets, which lo's counters show. */
  if (!snmp_all_zero(in_dir(path, proc_net, "snmp"), 1)) return 0;
  if (!snmp_all_zero(in_dir(path, proc_net, "snmp6"), 0)) return 0;
  int n = warren_read_small_file(in_dir(path, proc_net, "unix"), buf, sizeof buf);
  if (n < 0) return 0;
  char* nl = strchr(buf, '\n');
  return nl && nl[1] == 0; /* the header line alone */
}
