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
 * nearly all of it the kernel's. */
int warren_netns_pristine(const char* proc_net);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_ISOLATION_NETNS_PRISTINE_H_ */
