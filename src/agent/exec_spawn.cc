#include "agent/exec_spawn.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace warren::agent {

ExecPlan PlanExec(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  const char* default_path) {
  ExecPlan p;
  for (const auto& a : argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (const auto& e : env) p.envp.push_back(const_cast<char*>(e.c_str()));
  p.envp.push_back(nullptr);
  p.sh_argv.push_back(const_cast<char*>("/bin/sh"));
  p.sh_argv.push_back(nullptr);  // the candidate, set by the child
  for (size_t i = 1; i < argv.size(); ++i) p.sh_argv.push_back(p.argv[i]);
  p.sh_argv.push_back(nullptr);
  const std::string cmd = argv.empty() ? std::string() : argv[0];
  if (cmd.find('/') != std::string::npos) {
    p.candidates.push_back(cmd);
  } else if (!cmd.empty()) {
    std::string path = default_path;
    for (const auto& e : env)
      if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
    size_t start = 0;
    for (;;) {
      size_t end = path.find(':', start);
      std::string dir =
          path.substr(start, end == std::string::npos ? std::string::npos : end - start);
      p.candidates.push_back((dir.empty() ? "." : dir) + "/" + cmd);
      if (end == std::string::npos) break;
      start = end + 1;
    }
  } else {
    p.candidates.push_back("");  // execve("") fails with ENOENT, like execvp
  }
  return p;
}

void ExecPlanned(ExecPlan& p) {
  // The first candidate that is not missing wins; a permission error is reported only if
  // nothing else was found (as a shell does).
  bool denied = false;
  for (const std::string& path : p.candidates) {
    execve(path.c_str(), p.argv.data(), p.envp.data());
    if (errno == ENOEXEC) {  // no #! line: a shell script, as execvp runs it
      p.sh_argv[1] = const_cast<char*>(path.c_str());
      execve("/bin/sh", p.sh_argv.data(), p.envp.data());
      errno = ENOEXEC;
    }
    if (errno == EACCES)
      denied = true;
    else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV &&
             errno != ETIMEDOUT)
      break;
  }
  if (denied && (errno == ENOENT || errno == ENOTDIR)) errno = EACCES;
}

pid_t CloneVforked(int (*child)(void*), void* arg) {
  constexpr size_t kStack = 64 * 1024;
  static char* stack = static_cast<char*>(aligned_alloc(64, kStack));
  if (!stack) return -1;
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  const pid_t pid = clone(child, stack + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
  const int err = errno;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return pid;
}

}  // namespace warren::agent
