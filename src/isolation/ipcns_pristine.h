// Whether an IPC namespace is as new: the test for lending one to another call
// (agent/call_ns_pool.h), as netns_pristine.h is for a net namespace.
//
// What a call can leave in an IPC namespace, its processes gone: System V shared memory,
// semaphore sets and message queues (each lives until removed), POSIX message queues (until
// unlinked), and, even with all of them removed, the ids the next ones get (each kind's ids
// advance with every one made: how many a call made would show to the next). Its limits
// (kernel.shm*, msg*, sem, fs.mqueue.*) only the namespace's root may change, which no call is.
//
// So a namespace is judged by whether any System V object was ever made in it, not only
// whether one is left: its `kernel.{shm,msg,sem}_next_id` (the checkpoint/restore knob that
// names the id the next object gets, -1 when unset) are set to 0 when it is made, and the
// kernel unsets each at the next object of its kind. A call's first object of a kind then gets
// the id it would in a new namespace (0), and any later one the same id too, except after one
// was removed (a new namespace would not give that id again at once; nothing of another call
// shows in it). And no POSIX queue may be there: its mqueue superblock's root (mounted from
// inside, the namespace's own) grows by a fixed size for each queue it holds.
//
// The probe's files are opened inside the namespace once (each stays bound to it) and read
// from outside at every check: four system calls.
#pragma once

#include <sys/types.h>

#include "base/unique_fd.h"

namespace warren::isolation {

class IpcnsProbe {
 public:
  // In the namespace (the calling thread's): false where the kernel has no next_id knobs
  // (CONFIG_CHECKPOINT_RESTORE) or they cannot be set, and the namespace is then never lent
  // again.
  bool Open();
  bool Pristine() const;

 private:
  UniqueFd next_id_[3];   // shm, msg, sem
  UniqueFd mqueue_;       // the mqueue superblock's root
  off_t empty_size_ = 0;  // its size with no queue
};

}  // namespace warren::isolation
