/* The isolation recipe of one fncall call's worker: the one copy, in C with libc only, because
 * it runs both in the static agent (native workers, for programs that are exec'd: see
 * agent/call_worker.h) and in warren-zygote.so, which is loaded into whatever python3 a runner
 * image has (Python calls; see runtime/fncall/zygote_lib.c). zygote.py's own loop, for an
 * interpreter that cannot load that library, follows the same steps with the constants the
 * dispatcher sends it from here.
 *
 * The caller is pid 1 of the call's fresh mount, pid and uts namespaces (and of IPC and net ones
 * that are new or as new), still root of the runner. After warren_call_setup() it is the call's uid
 * with no capabilities, in its own /proc (with what a call must not read masked), a fresh tmpfs on
 * /tmp (its cwd) and /dev/shm, a read-only /, lo up, hostname "sandbox", no_new_privs, Landlock
 * (writes only in its tmpfs, no signals or abstract sockets out) and the call's seccomp filter. */
#ifndef WARREN_ISOLATION_CALL_SETUP_H_
#define WARREN_ISOLATION_CALL_SETUP_H_

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* warren_call_setup's flags. The runner's / is a shared mount: make the call's copy private
 * first. The image has /dev/shm: it gets a tmpfs of the call's own. The caller's mount
 * namespace already has / private and read-only (the zygote did it once for all its clones). */
#define WARREN_CALL_MAKE_PRIVATE 1u
#define WARREN_CALL_HAS_SHM 2u
#define WARREN_CALL_ROOT_DONE 4u
/* Which of warren_call_proc_masks the kernel has no file for, learnt once by
 * warren_call_prepare_root (the set is the kernel's, the same in every /proc): a worker skips
 * those instead of failing a mount and an access on each, every call. */
#define WARREN_CALL_PROC_MASKS_KNOWN 8u
#define WARREN_CALL_PROC_MASK_ABSENT(i) (1u << (8 + (i)))

/* Files a call's /tmp (and /dev/shm) may hold: each inode is kernel memory no process owns. */
#define WARREN_CALL_TMP_INODES 32768

/* What a call's own fresh /proc still shows an unprivileged reader and a call must not see:
 * per-interrupt counts (a side channel on whatever else runs on the host), the kernel's config,
 * its symbols (addresses where kptr_restrict is 0) and, on older kernels, scheduler debug data
 * and latency stats. Each gets /dev/null bound over it (absent ones are skipped). The rest of
 * runc's list is root-only to begin with, and every mount is paid again by every call. Left
 * readable: the `intr` and `softirq` totals of /proc/stat, which top, ps and psutil read. */
extern const char* const warren_call_proc_masks[];
extern const size_t warren_call_proc_masks_count;

struct warren_call_params {
  uid_t uid;                    /* the call's own uid (and gid) */
  unsigned long long tmp_bytes; /* the size of its /tmp (and of its /dev/shm) */
  unsigned flags;               /* WARREN_CALL_* */
  unsigned long root_flags;     /* the runner's / mount flags (noatime...), kept on remount */
  const void* bpf;              /* the call's seccomp filter (sock_filter[]); none if 0 bytes */
  size_t bpf_len;
};

/* Applies the recipe. Returns NULL, or the step that failed (a static string such as
 * "/proc" or "landlock_restrict_self") with errno saying why: the caller reports it and ends,
 * since a half set-up worker must never run a call. */
const char* warren_call_setup(const struct warren_call_params* setup);

/* For whoever clones the workers (the Python zygote, the native forker): a mount namespace of
 * its own, made once, with / private (if the runner's is shared) and read-only as every
 * worker's must be, so that workers copy it and skip both (2 of the 5 mount calls of their
 * set-up, and as many mounts fewer to tear down). The dispatcher stays in the runner's. Returns
 * `flags` with WARREN_CALL_ROOT_DONE added, or without it where any step failed (workers then
 * do it all), and with the absent masks (WARREN_CALL_PROC_MASKS_KNOWN) either way. */
unsigned warren_call_prepare_root(unsigned flags, unsigned long root_flags);

/* Also once, where warren_call_prepare_root succeeded (never in the runner's own namespace):
 * detaches what every call covers with its own mounts, the runner's masks under /proc (a call
 * mounts a fresh /proc over it, with its own masks) and, with WARREN_CALL_HAS_SHM, its
 * /dev/shm. Each clone copies every mount of the namespace and each exit tears the copies down
 * again: 25 per call here, 12 without these. The runner's /proc itself stays: the kernel lets
 * a user namespace mount a new proc only where one is already fully visible. */
void warren_call_detach_covered(unsigned flags);

#ifdef __cplusplus
}
#endif

#endif /* WARREN_ISOLATION_CALL_SETUP_H_ */
