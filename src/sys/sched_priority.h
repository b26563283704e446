// Background and foreground CPU priority of a thread or process (sched_setscheduler(2),
// setpriority(2)): what the node's refill work runs at, and what a claimed sandbox returns to.
#pragma once

#include <sys/types.h>

#include "base/status.h"

namespace warren::sys {

// SCHED_IDLE: any runnable task of a normal policy preempts it at its next wakeup, with no
// slice of its own to finish first, as nice 19 still has under EEVDF. Nice 19 as well: the
// scheduler ignores it under SCHED_IDLE, but ps and top show it, and a policy reset by anyone
// else leaves the task at the lowest priority still. `tid` 0: the calling thread. Children
// inherit both.
Status SetBackgroundPriority(pid_t tid);

// SCHED_OTHER at nice 0: undoes SetBackgroundPriority.
Status SetNormalPriority(pid_t tid);

}  // namespace warren::sys
