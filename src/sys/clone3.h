// clone3(2): the only way to get a pidfd and place the child into a cgroup v2 node
// atomically (CLONE_INTO_CGROUP), so no process of a sandbox ever runs outside its cgroup.
#pragma once

#include <sys/types.h>

#include <cstdint>

// glibc's <sched.h> lacks the clone3-only flags and conflicts with <linux/sched.h>.
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

namespace warren::sys {

struct CloneArgs {
  uint64_t flags = 0;        // CLONE_NEW* | CLONE_PIDFD | CLONE_INTO_CGROUP
  int* pidfd = nullptr;      // receives the pidfd with CLONE_PIDFD
  int cgroup_fd = -1;        // with CLONE_INTO_CGROUP
  int exit_signal = 17;      // SIGCHLD
};

// Like fork(): returns 0 in the child, the pid in the parent, -1 with errno on failure.
// The child of a multithreaded parent may only make async-signal-safe calls.
pid_t Clone3(const CloneArgs& args);

}  // namespace warren::sys
