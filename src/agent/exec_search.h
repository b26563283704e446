// execvpe's search for a program, split in two so that a child sharing its parent's memory
// (vfork, CLONE_VM) can run it: the parent plans (allocates), the child only calls execve.
#pragma once

#include <string>
#include <vector>

namespace warren::agent {

struct ExecPlan {
  std::vector<char*> argv, envp;        // null-terminated, pointing into the caller's strings
  std::vector<std::string> candidates;  // where argv[0] may be, in PATH order
  std::vector<char*> sh_argv;           // {"/bin/sh", <candidate>, argv[1..]} for ENOEXEC
};

// `argv` and `env` ("K=V") must outlive the plan. argv[0] without a slash is looked up in the
// PATH of `env`, or `default_path` if it has none (as a shell would, not the parent's PATH).
ExecPlan PlanExec(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  const char* default_path);

// In the child: execve's each candidate; a file without a #! line runs under /bin/sh, as execvp
// does. Returns only if none ran, with errno as execvp leaves it (EACCES if a candidate was
// found but not executable and nothing better was). Allocates nothing.
void ExecPlanned(ExecPlan& plan);

}  // namespace warren::agent
