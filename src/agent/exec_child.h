// The child of an exec request: everything between the spawn and execve().
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace warren::agent {

struct ChildSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V"
  std::string cwd;
  int stdin_fd = -1;   // read end, or -1 for /dev/null
  int stdout_fd = -1;  // write ends
  int stderr_fd = -1;
  int error_fd = -1;  // CLOEXEC pipe: on failure the child writes "stage errno" and exits
  uint64_t nofile = 4096;
  int agent_oom_score_adj = 0;
  int cgroup_procs_fd = -1;  // the commands' cgroup: the child moves itself in first
  // A node-internal channel command (the fncall runner's dispatcher): keeps the sandbox
  // root's capabilities, which it needs to make each call's namespaces. Never set for
  // anything a user asked to run.
  bool keep_caps = false;
  bool keep_chroot = true;  // CAP_SYS_CHROOT among the kept capabilities (not in a microVM)
  // stdin, stdout and stderr are one pty slave, which becomes the command's controlling
  // terminal (its new session's).
  bool tty = false;
};

// Starts the command the way posix_spawn does: a child sharing the agent's memory
// (CLONE_VM | CLONE_VFORK), so neither the agent's page tables are copied nor its pages
// faulted copy-on-write, which on this kind of host cost more than the command's own exec.
// The agent sleeps until the child has exec'd or failed, so once this returns the error pipe
// already holds the verdict. Returns the pid, or -1 with errno.
pid_t SpawnChild(const ChildSpec& spec);

}  // namespace warren::agent
