#include "agent/exec_child.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include "isolation/capabilities.h"

namespace warren::agent {
namespace {

[[noreturn]] void Fail(int error_fd, const char* stage, int code) {
  int err = errno;
  char buf[64];
  int n = snprintf(buf, sizeof buf, "%s %d", stage, err);
  if (n > 0) (void)!write(error_fd, buf, static_cast<size_t>(n));
  _exit(code);
}

}  // namespace

void ExecChild(const ChildSpec& s) {
  // The agent blocks SIGCHLD for its signalfd and ignores SIGPIPE: undo both for the command.
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_UNBLOCK, &all, nullptr);
  signal(SIGPIPE, SIG_DFL);  // the only disposition the agent changes
  // Own session and process group: a timeout or signal hits the whole command tree.
  setsid();
  // Into the commands' memory cgroup, away from the agent (see isolation/cgroup.h).
  if (s.cgroup_procs_fd >= 0 && write(s.cgroup_procs_fd, "0", 1) != 1) Fail(s.error_fd, "cgroup", 126);
  // The command, not the agent, must be the one the OOM killer picks: its score is the
  // agent's plus 998 (0 where the node could lower the agent to -998; 998 on hosts where
  // root lacks CAP_SYS_RESOURCE and the agent stays at 0). Raising is always allowed.
  int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) {
    char v[16];
    int n = snprintf(v, sizeof v, "%d", std::min(1000, s.agent_oom_score_adj + 998));
    if (n > 0) (void)!write(oom, v, static_cast<size_t>(n));
    close(oom);
  }
  // The command's limits and capabilities (the agent itself keeps its own).
  rlimit nofile{s.nofile, s.nofile}, nocore{0, 0};
  if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) Fail(s.error_fd, "rlimit", 126);
  // No core dumps: the host's core_pattern would handle them outside the sandbox.
  if (setrlimit(RLIMIT_CORE, &nocore) != 0) Fail(s.error_fd, "rlimit", 126);
  if (!s.keep_caps && !isolation::RestrictCapabilities().ok()) Fail(s.error_fd, "capabilities", 126);
  int in = s.stdin_fd >= 0 ? s.stdin_fd : open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0 || dup2(s.stdout_fd, 1) < 0 || dup2(s.stderr_fd, 2) < 0)
    Fail(s.error_fd, "dup2", 126);
  if (chdir(s.cwd.empty() ? "/" : s.cwd.c_str()) != 0) Fail(s.error_fd, "chdir", 126);
  // Close everything but stdio and the error pipe (which is CLOEXEC itself).
  if (s.error_fd > 3) syscall(SYS_close_range, 3u, static_cast<unsigned>(s.error_fd - 1), 0u);
  syscall(SYS_close_range, static_cast<unsigned>(s.error_fd + 1), ~0u, 0u);

  std::vector<char*> argv, envp;
  for (const auto& a : s.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : s.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // execvpe searches PATH from the environment we pass, as a shell would.
  for (const auto& e : s.env)
    if (e.rfind("PATH=", 0) == 0) setenv("PATH", e.c_str() + 5, 1);
  execvpe(argv[0], argv.data(), envp.data());
  Fail(s.error_fd, "exec", errno == ENOENT ? 127 : 126);
}

}  // namespace warren::agent
