// The forked child of an exec request: everything between fork() and execvpe().
#pragma once

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
  int error_fd = -1;   // CLOEXEC pipe: on failure the child writes "stage errno" and exits
  uint64_t nofile = 4096;
  int agent_oom_score_adj = 0;
  int cgroup_procs_fd = -1;  // the commands' cgroup: the child moves itself in first
  // A node-internal channel command (the fncall runner's dispatcher): keeps the sandbox
  // root's capabilities, which it needs to make each call's namespaces. Never set for
  // anything a user asked to run.
  bool keep_caps = false;
};

// Never returns.
[[noreturn]] void ExecChild(const ChildSpec& spec);

}  // namespace warren::agent
