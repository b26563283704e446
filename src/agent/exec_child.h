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
  int null_fd = -1;  // the agent's /dev/null, opened once (-1: the child opens it)
  uint64_t nofile = 4096;
  int agent_oom_score_adj = 0;
  int cgroup_procs_fd = -1;  // the commands' cgroup: the child moves itself in first
  // A node-internal channel command (the fncall runner's dispatcher): keeps the sandbox
  // root's capabilities, which it needs to make each call's namespaces. Never set for
  // anything a user asked to run.
  bool keep_caps = false;
  bool keep_chroot = true;  // CAP_SYS_CHROOT among the kept capabilities (not in a microVM)
  // The agent narrowed its own bounding set to the kept capabilities when it sealed the
  // sandbox, so the child drops only its effective, permitted and inheritable sets.
  bool bounding_narrowed = false;
  // stdin, stdout and stderr are one pty slave, which becomes the command's controlling
  // terminal (its new session's).
  bool tty = false;
};

// What became of a spawn. `pid` -1: no child (errno in `error`). Otherwise a child was made;
// if `failed_stage` is set it did not exec but failed there with `error` and exited 126
// (127 for an exec of something not found): "cgroup", "rlimit", "capabilities", "dup2",
// "tty", "chdir" or "exec".
struct Spawned {
  pid_t pid = -1;
  const char* failed_stage = nullptr;
  int error = 0;
};

// Starts the command the way posix_spawn does: a child sharing the agent's memory
// (CLONE_VM | CLONE_VFORK), so neither the agent's page tables are copied nor its pages
// faulted copy-on-write, which on this kind of host cost more than the command's own exec.
// The agent sleeps until the child has exec'd or failed, and the child reports a failure in
// that shared memory (as glibc's posix_spawn does) rather than through a pipe: no pipe to
// make, read and close per command.
//
// Only the signals whose disposition is not the default are reset in the child: the set is
// read from the kernel once and kept, so the caller sets its dispositions before it (the agent
// does, once, at start).
Spawned SpawnChild(const ChildSpec& spec);

// Reads that set now (62 system calls) rather than at the first spawn: the agent calls it
// before it says ready, so a sandbox's first command does not pay for it.
void LearnSignalDispositions();

}  // namespace warren::agent
