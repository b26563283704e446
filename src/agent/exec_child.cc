#include "agent/exec_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "agent/exec_spawn.h"
#include "isolation/capabilities.h"

namespace warren::agent {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Everything the child needs, built by the parent: the child shares the agent's heap and may
// not allocate (nor touch the agent's environment, as execvpe's setenv would).
struct Prepared {
  const ChildSpec* spec;
  ExecPlan plan;
  char oom[16] = {};
  size_t oom_len = 0;
};

[[noreturn]] void Fail(int error_fd, const char* stage, int code) {
  int err = errno;
  char buf[64];
  int n = snprintf(buf, sizeof buf, "%s %d", stage, err);
  if (n > 0) (void)!write(error_fd, buf, static_cast<size_t>(n));
  _exit(code);
}

int ChildMain(void* arg) {
  Prepared& p = *static_cast<Prepared*>(arg);
  const ChildSpec& s = *p.spec;
  // Every signal the command may get at its default: the agent ignores SIGPIPE, and may have
  // been started ignoring others (a daemon started in the background by a shell without job
  // control ignores SIGINT and SIGQUIT, and an ignored signal stays ignored across exec: ^C in
  // a terminal would then stop nothing). This child has its own copy of the table. The agent
  // also blocked every signal around the spawn: undo that too.
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Own session and process group: a timeout or signal hits the whole command tree.
  setsid();
  // Into the commands' memory cgroup, away from the agent (see isolation/cgroup.h).
  if (s.cgroup_procs_fd >= 0 && write(s.cgroup_procs_fd, "0", 1) != 1)
    Fail(s.error_fd, "cgroup", 126);
  // The command, not the agent, must be the one the OOM killer picks: its score is the
  // agent's plus 998 (0 where the node could lower the agent to -998; 998 on hosts where
  // root lacks CAP_SYS_RESOURCE and the agent stays at 0). Raising is always allowed.
  int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) {
    (void)!write(oom, p.oom, p.oom_len);
    close(oom);
  }
  // The command's limits and capabilities (the agent itself keeps its own).
  rlimit nofile{s.nofile, s.nofile}, nocore{0, 0};
  if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) Fail(s.error_fd, "rlimit", 126);
  // No core dumps: the host's core_pattern would handle them outside the sandbox.
  if (setrlimit(RLIMIT_CORE, &nocore) != 0) Fail(s.error_fd, "rlimit", 126);
  if (!s.keep_caps && isolation::RestrictCapabilitiesRaw(s.keep_chroot) != 0)
    Fail(s.error_fd, "capabilities", 126);
  int in = s.stdin_fd >= 0 ? s.stdin_fd : open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0 || dup2(s.stdout_fd, 1) < 0 || dup2(s.stderr_fd, 2) < 0)
    Fail(s.error_fd, "dup2", 126);
  // The terminal becomes the new session's: job control, ^C as SIGINT to the foreground
  // group, SIGHUP when it hangs up.
  if (s.tty && ioctl(0, TIOCSCTTY, 0) != 0) Fail(s.error_fd, "tty", 126);
  if (chdir(s.cwd.empty() ? "/" : s.cwd.c_str()) != 0) Fail(s.error_fd, "chdir", 126);
  // Close everything but stdio and the error pipe (which is CLOEXEC itself).
  if (s.error_fd > 3) syscall(SYS_close_range, 3u, static_cast<unsigned>(s.error_fd - 1), 0u);
  syscall(SYS_close_range, static_cast<unsigned>(s.error_fd + 1), ~0u, 0u);

  ExecPlanned(p.plan);
  Fail(s.error_fd, "exec", errno == ENOENT ? 127 : 126);
}

}  // namespace

pid_t SpawnChild(const ChildSpec& s) {
  Prepared p;
  p.spec = &s;
  p.plan = PlanExec(s.argv, s.env, kDefaultPath);
  int n = snprintf(p.oom, sizeof p.oom, "%d", std::min(1000, s.agent_oom_score_adj + 998));
  p.oom_len = n > 0 ? static_cast<size_t>(n) : 0;

  return CloneVforked(ChildMain, &p);
}

}  // namespace warren::agent
