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

// The signals to put back at their default in each child: every one whose disposition is
// not the default here (ignored ones survive execve; handled ones must not run on the child's
// side before it). Read once: each sigaction is a system call, 62 of them per command.
struct ResetSignals {
  int sigs[NSIG] = {};
  int count = 0;
  bool known = false;
};
ResetSignals g_reset;

void ReadDispositions() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction old {};
    // glibc refuses its own internal signals (EINVAL): nothing of ours to reset there.
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
      g_reset.sigs[g_reset.count++] = sig;
  }
  g_reset.known = true;
}

// Everything the child needs, built by the parent: the child shares the agent's heap and may
// not allocate (nor touch the agent's environment, as execvpe's setenv would). The child
// writes its verdict here too: the parent reads it once the child has exec'd or ended.
struct Prepared {
  const ChildSpec* spec;
  ExecPlan plan;
  char oom[16] = {};
  size_t oom_len = 0;
  const char* failed_stage = nullptr;
  int error = 0;
};

[[noreturn]] void Fail(Prepared& p, const char* stage, int code) {
  p.error = errno;
  p.failed_stage = stage;
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
  for (int i = 0; i < g_reset.count; ++i) signal(g_reset.sigs[i], SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Own session and process group: a timeout or signal hits the whole command tree.
  setsid();
  // Into the commands' memory cgroup, away from the agent (see isolation/cgroup.h).
  if (s.cgroup_procs_fd >= 0 && write(s.cgroup_procs_fd, "0", 1) != 1) Fail(p, "cgroup", 126);
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
  if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) Fail(p, "rlimit", 126);
  // No core dumps: the host's core_pattern would handle them outside the sandbox.
  if (setrlimit(RLIMIT_CORE, &nocore) != 0) Fail(p, "rlimit", 126);
  if (!s.keep_caps &&
      isolation::RestrictCapabilitiesRaw(s.keep_chroot, /*bounding=*/!s.bounding_narrowed) != 0)
    Fail(p, "capabilities", 126);
  int in = s.stdin_fd >= 0 ? s.stdin_fd : s.null_fd >= 0 ? s.null_fd : open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0 || dup2(s.stdout_fd, 1) < 0 || dup2(s.stderr_fd, 2) < 0)
    Fail(p, "dup2", 126);
  // The terminal becomes the new session's: job control, ^C as SIGINT to the foreground
  // group, SIGHUP when it hangs up.
  if (s.tty && ioctl(0, TIOCSCTTY, 0) != 0) Fail(p, "tty", 126);
  if (chdir(s.cwd.empty() ? "/" : s.cwd.c_str()) != 0) Fail(p, "chdir", 126);
  // Close everything but stdio.
  syscall(SYS_close_range, 3u, ~0u, 0u);

  ExecPlanned(p.plan);
  Fail(p, "exec", errno == ENOENT ? 127 : 126);
}

}  // namespace

void LearnSignalDispositions() {
  if (!g_reset.known) ReadDispositions();
}

Spawned SpawnChild(const ChildSpec& s) {
  LearnSignalDispositions();
  Prepared p;
  p.spec = &s;
  p.plan = PlanExec(s.argv, s.env, kDefaultPath);
  int n = snprintf(p.oom, sizeof p.oom, "%d", std::min(1000, s.agent_oom_score_adj + 998));
  p.oom_len = n > 0 ? static_cast<size_t>(n) : 0;

  Spawned out;
  out.pid = CloneVforked(ChildMain, &p);
  if (out.pid < 0) {
    out.error = errno;
    return out;
  }
  // The child has exec'd or ended by now (vfork): what it wrote is final.
  out.failed_stage = p.failed_stage;
  out.error = p.error;
  return out;
}

}  // namespace warren::agent
