/* Whether an IPC namespace is as new: the test for lending one to another call, as
 * netns_pristine.h is for a net namespace (agent/call_ns_pool.h for native workers,
 * runtime/fncall/zygote_lib.c for Python ones).
 *
 * What a call can leave in an IPC namespace, its processes gone: System V shared memory,
 * semaphore sets and message queues (each lives until removed), POSIX message queues (until
 * unlinked), and, even with all of them removed, the ids the next ones get (each kind's ids
 * advance with every one made: how many a call made would show to the next). Its limits
 * (kernel.shm*, msg*, sem, fs.mqueue.*) only the namespace's root may change, which no call is.
 *
 * So a namespace is judged by whether any System V object was ever made in it, not only
 * whether one is left: its `kernel.{shm,msg,sem}_next_id` (the checkpoint/restore knob that
 * names the id the next object gets, -1 when unset) are set to 0 when it is made, and the
 * kernel unsets each at the next object of its kind. A call's first object of a kind then gets
 * the id it would in a new namespace (0), and any later one the same id too, except after one
 * was removed (a new namespace would not give that id again at once; nothing of another call
 * shows in it). And no POSIX queue may be there: its mqueue superblock's root (mounted from
 * inside, the namespace's own, detached) grows by a fixed size for each queue it holds.
 *
 * The probe's files are opened inside the namespace once (each stays bound to it) and read
 * from outside at every check: four system calls.
 *
 * libc only, C (system calls by number: a runner image's libc may predate the mount API's
 * wrappers): built into warren-zygote.so and the agent. */
#ifndef WARREN_ISOLATION_IPCNS_PRISTINE_H_
#define WARREN_ISOLATION_IPCNS_PRISTINE_H_

#ifdef __cplusplus
extern "C" {
#endif

struct warren_ipcns_probe {
  int next_id[3];       /* shm, msg, sem: -1 when not open */
  int mqueue;           /* the mqueue superblock's root */
  long long empty_size; /* its size with no queue ("." and "..") */
};

/* In the namespace (the calling thread's): sets the knobs and opens the probe. 0, or -1 with
 * none open: a kernel without the knobs (CONFIG_CHECKPOINT_RESTORE), or they cannot be set. */
int warren_ipcns_probe_open(struct warren_ipcns_probe* probe);
/* 1 if the namespace it was opened in is as new, 0 if not (or a file cannot be read). */
int warren_ipcns_probe_pristine(const struct warren_ipcns_probe* probe);
void warren_ipcns_probe_close(struct warren_ipcns_probe* probe);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_ISOLATION_IPCNS_PRISTINE_H_ */
