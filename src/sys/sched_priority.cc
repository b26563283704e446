#include "sys/sched_priority.h"

#include <sched.h>
#include <sys/resource.h>

#include <string>

namespace warren::sys {
namespace {

Status SetPolicy(pid_t tid, int policy, int nice) {
  sched_param param{};
  if (sched_setscheduler(tid, policy, &param) != 0)
    return ErrnoStatus("sched_setscheduler", "task " + std::to_string(tid));
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) != 0)
    return ErrnoStatus("setpriority", "task " + std::to_string(tid));
  return Status::Ok();
}

}  // namespace

Status SetBackgroundPriority(pid_t tid) { return SetPolicy(tid, SCHED_IDLE, 19); }

Status SetNormalPriority(pid_t tid) { return SetPolicy(tid, SCHED_OTHER, 0); }

}  // namespace warren::sys
