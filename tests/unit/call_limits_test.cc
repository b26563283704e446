// warren_call_set_limits, the rlimits of every fncall worker (Python and native): each runs in
// a forked child, since limits once lowered stay lowered. No root needed.
#include "isolation/call_limits.h"

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>

#include "test_files.h"

namespace {

// Runs `body` in a child; its return value (an empty string: passed) comes back as the child's
// report on a pipe.
std::string InChild(const std::function<std::string()>& body) {
  int p[2];
  if (pipe(p) != 0) return "pipe";
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    const std::string why = body();
    (void)!write(p[1], why.data(), why.size());
    _exit(0);
  }
  close(p[1]);
  std::string out = warren::testing::ReadToEndAndClose(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) out += " (child did not exit cleanly)";
  return out;
}

std::string Expect(int resource, const char* name, rlim_t soft, rlim_t hard) {
  rlimit r{};
  getrlimit(resource, &r);
  if (r.rlim_cur == soft && r.rlim_max == hard) return "";
  return std::string(name) + ": " + std::to_string(r.rlim_cur) + "/" + std::to_string(r.rlim_max) +
         ", want " + std::to_string(soft) + "/" + std::to_string(hard) + "; ";
}

TEST(CallLimits, SetsEachLimitAskedForAndNoCoreDumps) {
  EXPECT_EQ(InChild([] {
              rlimit stack_before{};
              getrlimit(RLIMIT_STACK, &stack_before);
              const warren_call_limits l{7, 1ull << 30, 0, 1ull << 20, 100, 256};
              if (const char* failed = warren_call_set_limits(&l))
                return std::string("failed: ") + failed + ": " + strerror(errno);
              return Expect(RLIMIT_CPU, "cpu", 7, 8) +
                     Expect(RLIMIT_AS, "as", 1ull << 30, 1ull << 30) +
                     Expect(RLIMIT_FSIZE, "fsize", 1ull << 20, 1ull << 20) +
                     Expect(RLIMIT_NPROC, "nproc", 100, 100) +
                     Expect(RLIMIT_NOFILE, "nofile", 256, 256) + Expect(RLIMIT_CORE, "core", 0, 0) +
                     // Not asked for: the worker's own stays.
                     Expect(RLIMIT_STACK, "stack", stack_before.rlim_cur, stack_before.rlim_max);
            }),
            "");
}

TEST(CallLimits, NeverRaisesAboveTheHardLimitItInherited) {
  EXPECT_EQ(InChild([] {
              // The runner's own hard limits, lower than what the call asks.
              const rlimit cpu{5, 5}, files{64, 64};
              if (setrlimit(RLIMIT_CPU, &cpu) != 0 || setrlimit(RLIMIT_NOFILE, &files) != 0)
                return std::string("preset: ") + strerror(errno);
              const warren_call_limits l{10, 0, 0, 0, 0, 4096};
              if (const char* failed = warren_call_set_limits(&l))
                return std::string("failed: ") + failed + ": " + strerror(errno);
              return Expect(RLIMIT_CPU, "cpu", 5, 5) + Expect(RLIMIT_NOFILE, "nofile", 64, 64);
            }),
            "");
  // Room for the SIGKILL second under a finite hard limit: (cpu, cpu + 1) still.
  EXPECT_EQ(InChild([] {
              const rlimit cpu{100, 100};
              if (setrlimit(RLIMIT_CPU, &cpu) != 0) return std::string("preset");
              const warren_call_limits l{10, 0, 0, 0, 0, 0};
              if (warren_call_set_limits(&l)) return std::string("failed");
              return Expect(RLIMIT_CPU, "cpu", 10, 11);
            }),
            "");
}

TEST(CallLimits, ALimitThatCannotBeSetNamesItself) {
  EXPECT_EQ(InChild([] {
              // Every prlimit64 (what getrlimit and setrlimit are) fails with EPERM.
              sock_filter code[] = {
                  BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
                  BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prlimit64, 0, 1),
                  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
                  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
              };
              sock_fprog prog{sizeof code / sizeof code[0], code};
              if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
                  prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
                return std::string("seccomp: ") + strerror(errno);
              const warren_call_limits l{0, 1ull << 30, 0, 0, 0, 0};
              const char* failed = warren_call_set_limits(&l);
              if (!failed) return std::string("no failure reported");
              if (std::string(failed) != "RLIMIT_AS" || errno != EPERM)
                return std::string("reported ") + failed + ": " + strerror(errno);
              return std::string();
            }),
            "");
}

}  // namespace
