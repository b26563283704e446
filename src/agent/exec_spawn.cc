#include "agent/exec_spawn.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

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

namespace {

// One candidate of the search: returns only if it did not run, true if the search goes on.
// The first candidate that is not missing wins; a permission error is reported only if nothing
// else was found (as a shell does).
bool TryCandidate(const char* path, char* const* argv, char* const* envp, char** sh_argv,
                  bool* denied) {
  execve(path, argv, envp);
  if (errno == ENOEXEC) {  // no #! line: a shell script, as execvp runs it
    sh_argv[0] = const_cast<char*>("/bin/sh");
    sh_argv[1] = const_cast<char*>(path);
    execve("/bin/sh", sh_argv, envp);
    errno = ENOEXEC;
  }
  if (errno == EACCES) {
    *denied = true;
    return true;
  }
  return errno == ENOENT || errno == ENOTDIR || errno == ESTALE || errno == ENODEV ||
         errno == ETIMEDOUT;
}

}  // namespace

void ExecPlanned(ExecPlan& p) {
  bool denied = false;
  for (const std::string& path : p.candidates)
    if (!TryCandidate(path.c_str(), p.argv.data(), p.envp.data(), p.sh_argv.data(), &denied)) break;
  if (denied && (errno == ENOENT || errno == ENOTDIR)) errno = EACCES;
}

void ExecSearch(char** argv, char* const* envp, const char* path) {
  const char* cmd = argv[0];
  // argv[-1] and argv[0] become {"/bin/sh", candidate} for a script without #!; the program
  // itself is exec'd with argv as it is, so argv[0] is put back each time.
  char** sh_argv = argv - 1;
  bool denied = false;
  if (!*cmd) {
    errno = ENOENT;  // like execvp
    return;
  }
  if (strchr(cmd, '/')) {
    TryCandidate(cmd, argv, envp, sh_argv, &denied);
    argv[0] = const_cast<char*>(cmd);
    if (denied && (errno == ENOENT || errno == ENOTDIR)) errno = EACCES;
    return;
  }
  const size_t cmd_len = strlen(cmd);
  char candidate[PATH_MAX];
  for (const char* dir = path;;) {
    const char* end = strchrnul(dir, ':');
    size_t dir_len = static_cast<size_t>(end - dir);
    const char* d = dir_len ? dir : ".";
    if (!dir_len) dir_len = 1;
    if (dir_len + 1 + cmd_len < sizeof candidate) {
      memcpy(candidate, d, dir_len);
      candidate[dir_len] = '/';
      memcpy(candidate + dir_len + 1, cmd, cmd_len + 1);
      const bool go_on = TryCandidate(candidate, argv, envp, sh_argv, &denied);
      argv[0] = const_cast<char*>(cmd);
      if (!go_on) break;
    } else {
      errno = ENAMETOOLONG;
    }
    if (!*end) break;
    dir = end + 1;
  }
  if (denied && (errno == ENOENT || errno == ENOTDIR)) errno = EACCES;
}

pid_t CloneVforked(int (*child)(void*), void* arg) {
  constexpr size_t kStack = 64 * 1024;
  static char* stack = static_cast<char*>(aligned_alloc(64, kStack));
  if (!stack) return -1;
  return CloneVforkedOn(child, arg, stack, kStack);
}

pid_t CloneVforkedOn(int (*child)(void*), void* arg, char* stack, size_t stack_size) {
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  const pid_t pid = clone(child, stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
  const int err = errno;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return pid;
}

}  // namespace warren::agent
