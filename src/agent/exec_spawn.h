// Starting a program the way posix_spawn does, from a process whose page tables are not worth
// copying (the agent, an fncall call's pid 1): a child that shares its parent's memory
// (CLONE_VM | CLONE_VFORK) and so may not allocate, and execvpe's search split in two for it:
// the parent plans (allocates), the child only calls execve.
#pragma once

#include <sys/types.h>

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

// Runs `child(arg)` on a stack of its own in a child sharing this process's memory; this
// thread sleeps until the child has exec'd or ended. Every signal is blocked across the clone,
// so no handler of the parent's runs on the child's side, and the mask is as it was on return:
// the child sets its own. One child at a time per process (one stack). Returns its pid, or -1
// with errno.
pid_t CloneVforked(int (*child)(void*), void* arg);

}  // namespace warren::agent
