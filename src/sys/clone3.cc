#include "sys/clone3.h"

#include <linux/sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace warren::sys {

pid_t Clone3(const CloneArgs& a) {
  clone_args args{};
  args.flags = a.flags;
  args.pidfd = reinterpret_cast<uint64_t>(a.pidfd);
  args.exit_signal = static_cast<uint64_t>(a.exit_signal);
  if (a.cgroup_fd >= 0) args.cgroup = static_cast<uint64_t>(a.cgroup_fd);
  return static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
}

#if defined(__x86_64__)

long RawSyscall(long n, long a1, long a2, long a3, long a4, long a5) {
  long ret;
  register long r10 asm("r10") = a4;
  register long r8 asm("r8") = a5;
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8)
               : "rcx", "r11", "memory");
  return ret;
}

pid_t Clone3Vm(const CloneArgs& a, int (*fn)(void*), void* arg, void* stack, size_t stack_size) {
  clone_args args{};
  args.flags = a.flags | CLONE_VM;
  args.pidfd = reinterpret_cast<uint64_t>(a.pidfd);
  args.exit_signal = static_cast<uint64_t>(a.exit_signal);
  if (a.cgroup_fd >= 0) args.cgroup = static_cast<uint64_t>(a.cgroup_fd);
  args.stack = reinterpret_cast<uint64_t>(stack);
  args.stack_size = stack_size;
  long ret;
  // The child returns from the system call on its new stack (the kernel points rsp at its top)
  // with every register but rax, rcx and r11 as the parent had them: fn and arg ride in
  // callee-saved r12 and r13. It must never return into this function's frame, which is the
  // parent's.
  register long r12 asm("r12") = reinterpret_cast<long>(fn);
  register long r13 asm("r13") = reinterpret_cast<long>(arg);
  asm volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xorl %%ebp, %%ebp\n\t"
      "andq $-16, %%rsp\n\t"
      "movq %%r13, %%rdi\n\t"
      "callq *%%r12\n\t"
      "movl %%eax, %%edi\n\t"
      "movl $60, %%eax\n\t"  // exit(2) of this task only
      "syscall\n\t"
      "hlt\n\t"
      "1:\n\t"
      : "=a"(ret)
      : "0"(static_cast<long>(SYS_clone3)), "D"(&args), "S"(sizeof args), "r"(r12), "r"(r13)
      : "rcx", "r11", "memory");
  if (ret < 0) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return static_cast<pid_t>(ret);
}

#else

long RawSyscall(long n, long a1, long a2, long a3, long a4, long a5) {
  long r = syscall(n, a1, a2, a3, a4, a5);
  return r < 0 ? -errno : r;
}

pid_t Clone3Vm(const CloneArgs&, int (*)(void*), void*, void*, size_t) {
  errno = ENOSYS;
  return -1;
}

#endif

}  // namespace warren::sys
