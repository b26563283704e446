// Starting a program the way posix_spawn does, from a process whose page tables are not worth
// copying (the agent, an fncall call's pid 1): a child that shares its parent's memory
// (CLONE_VM | CLONE_VFORK) and so may not allocate, and execvpe's search split in two for it:
// the parent plans (allocates), the child only calls execve.
#pragma once

#include <sys/types.h>

#include <cstddef>
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
// The same on a stack the caller owns, allocating nothing: for a native worker's pid 1, which
// runs in the forker's memory (call_worker.h).
pid_t CloneVforkedOn(int (*child)(void*), void* arg, char* stack, size_t stack_size);

// In the child, allocating nothing: execvpe's search for `argv[0]` in `path` (a PATH value,
// used only if argv[0] has no slash), each candidate built on the stack. `argv[-1]` must be
// writable: a file without a #! line runs as {"/bin/sh", candidate, argv[1..]} from there.
// Returns only if none ran, with errno as ExecPlanned leaves it.
void ExecSearch(char** argv, char* const* envp, const char* path);

}  // namespace warren::agent
