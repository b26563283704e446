#include "base/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/unique_fd.h"

extern char** environ;

namespace warren {

namespace {

// Spawns argv with stdin from /dev/null and stdout+stderr on `out_fd`.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                    int out_fd) {
  if (argv.empty()) return Invalid("empty argv");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  for (const auto& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return ErrnoStatus("spawn", argv[0], rc);
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

Result<SubprocessResult> RunProgram(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& extra_env) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", argv.empty() ? "" : argv[0]);
  UniqueFd rd(p[0]), wr(p[1]);
  pid_t pid = WARREN_TRY(Spawn(argv, extra_env, wr.get()));
  wr.Reset();
  SubprocessResult res;
  char buf[4096];
  for (;;) {
    ssize_t n = read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (res.output.size() < 65536) res.output.append(buf, static_cast<size_t>(n));
  }
  res.exit_code = Wait(pid);
  return res;
}

Result<int> RunProgramShowingOutput(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& extra_env) {
  pid_t pid = WARREN_TRY(Spawn(argv, extra_env, STDERR_FILENO));
  return Wait(pid);
}

}  // namespace warren
