/* Whether a network namespace is exactly as new: the test for lending one again.
 *
 * Making a network namespace is the dearest single step of a sandbox's or a call's start here
 * (every pernet subsystem's init, sysctl tables, lo's registration; then the same torn down in
 * a kworker, with an expedited RCU grace period), and most never touch the network. One whose
 * processes have all ended can go to the next sandbox or call if nothing in it tells of the
 * last: lo never carried a packet, no socket of any family is left (nor one in time-wait or
 * held by its own fds in flight), no IPv6 flow label lingers, and every SNMP counter is 0
 * (a connect to an address with no route moves OutNoRoutes without any packet). Nothing else
 * in a namespace can change without CAP_NET_ADMIN over it, so only a namespace owned by a user
 * namespace its occupants are not root of may be judged this way (the caller checks that).
 * What a later occupant can still tell is that it was used before: its inode number.
 *
 * libc only, C: built into warren-zygote.so (the fncall zygote) and into the node. */
#ifndef WARREN_ISOLATION_NETNS_PRISTINE_H_
#define WARREN_ISOLATION_NETNS_PRISTINE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if the namespace whose /proc/.../net directory is `proc_net` is pristine, 0 if not (or if
 * a file cannot be read). In a process with one thread, "/proc/self/net" shows the namespace
 * it is in; in a threaded one, "/proc/thread-self/net" shows the calling thread's. About 70 us,
 * nearly all of it the kernel's; through files opened once (below), one pread a file, 7 in all:
 * ~45 us, snmp6, snmp and unix the dearest (17, 12 and 12 us here). */
int warren_netns_pristine(const char* proc_net);

/* The files the check reads, opened once in a namespace and read again at each check: each
 * stays bound to the namespace it was opened in (and keeps it alive), so a namespace lent
 * many times is checked with a read of each, without entering it or opening anything (on
 * this kind of guest every system call costs a few microseconds of its own). -1: a file the
 * kernel does not have (no IPv6). */
enum { WARREN_NETNS_PROBE_FILES = 7 };
struct warren_netns_probe {
  int fd[WARREN_NETNS_PROBE_FILES];
};

/* Opens them from `proc_net` (as above); 0, or -1 with none open. */
int warren_netns_probe_open(const char* proc_net, struct warren_netns_probe* probe);
/* 1 if the namespace it was opened in is pristine, 0 if not (or a file cannot be read). */
int warren_netns_probe_pristine(const struct warren_netns_probe* probe);
void warren_netns_probe_close(struct warren_netns_probe* probe);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_ISOLATION_NETNS_PRISTINE_H_ */
