#include "sys/clone3.h"

#include <linux/sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace warren::sys {

pid_t Clone3(const CloneArgs& a) {
  clone_args args{};
  args.flags = a.flags;
  args.pidfd = reinterpret_cast<uint64_t>(a.pidfd);
  args.exit_signal = static_cast<uint64_t>(a.exit_signal);
  if (a.cgroup_fd >= 0) args.cgroup = static_cast<uint64_t>(a.cgroup_fd);
  return static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
}

}  // namespace warren::sys
