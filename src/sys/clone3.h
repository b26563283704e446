// clone3(2): the only way to get a pidfd and place the child into a cgroup v2 node
// atomically (CLONE_INTO_CGROUP), so no process of a sandbox ever runs outside its cgroup.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

// glibc's <sched.h> lacks the clone3-only flags and conflicts with <linux/sched.h>.
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

namespace warren::sys {

struct CloneArgs {
  uint64_t flags = 0;    // CLONE_NEW* | CLONE_PIDFD | CLONE_INTO_CGROUP
  int* pidfd = nullptr;  // receives the pidfd with CLONE_PIDFD
  int cgroup_fd = -1;    // with CLONE_INTO_CGROUP
  int exit_signal = 17;  // SIGCHLD
};

// Like fork(): returns 0 in the child, the pid in the parent, -1 with errno on failure.
// The child of a multithreaded parent may only make async-signal-safe calls.
pid_t Clone3(const CloneArgs& args);

// clone3 with CLONE_VM: the child runs fn(arg) on `stack` (its own; keep it until the child
// has exec'd or exited) in the caller's memory, so the kernel copies no page table of the
// caller. That copy, and undoing it at the child's exec, was the largest single cost of a
// sandbox create in a daemon with tens of MiB mapped. The child shares everything with the
// caller, including the calling thread's errno and glibc's idea of its threads: it may make
// raw system calls only (RawSyscall), never a glibc wrapper, never allocate. If fn returns,
// the child exits with its value. Returns the pid, or -1 with errno (ENOSYS on architectures
// without the trampoline: use Clone3 there).
pid_t Clone3Vm(const CloneArgs& args, int (*fn)(void*), void* arg, void* stack, size_t stack_size);

// A system call that leaves errno alone: the result, or -errno.
long RawSyscall(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0);

}  // namespace warren::sys
