#include "runtime/container/fs_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <vector>

#include "agent/agent.h"
#include "agent/fs_helper.h"
#include "base/unique_fd.h"

extern char** environ;

namespace warren::runtime {
namespace {

constexpr int kHelperTimeoutMs = 120'000;

// One of the fds the agent keeps for us (agent::kStagingDirFd), reopened as a directory.
Result<UniqueFd> OpenKept(pid_t pid, int fd, const char* sub) {
  const std::string p = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  UniqueFd kept(open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!kept) {
    if (errno == ENOENT && fd == agent::kStagingDirFd)
      return Status(Code::kUnavailable, "open writable layer", "sandbox",
                    "its agent keeps none (made by an older warren)");
    return ErrnoStatus("open kept directory", p);
  }
  UniqueFd dir(openat(kept.get(), sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return ErrnoStatus("open kept directory", p + "/" + sub);
  return dir;
}

// The fs helper: warren-agent --fs-helper PID, one request and one reply per line.
class Helper {
 public:
  static Result<Helper> Start(int agent_exe, int agent_pidfd) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return ErrnoStatus("pipe", "fs helper");
    UniqueFd in_r(in[0]), in_w(in[1]);
    if (pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus("pipe", "fs helper");
    UniqueFd out_r(out[0]), out_w(out[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_r.get(), 0);
    posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
    posix_spawn_file_actions_adddup2(&fa, agent_pidfd, 3);  // the agent's pidfd: setns through it
    const std::string exe = "/proc/self/fd/" + std::to_string(agent_exe);
    const std::string pid_arg = "3";
    char* argv[] = {const_cast<char*>("warren-fs-helper"), const_cast<char*>(agent::kFsHelperFlag),
                    const_cast<char*>(pid_arg.c_str()), nullptr};
    char* envp[] = {nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return ErrnoStatus("spawn", "fs helper", rc);
    Helper h;
    h.pid_ = pid;
    h.to_ = std::move(in_w);
    h.from_ = std::move(out_r);
    return h;
  }

  Helper() = default;
  Helper(Helper&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)), to_(std::move(o.to_)), from_(std::move(o.from_)) {}
  ~Helper() {
    if (pid_ <= 0) return;
    to_.Reset();  // EOF: it exits
    from_.Reset();
    for (int i = 0; i < 2000; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      usleep(1000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  Result<std::string> Ask(const std::string& line) {
    for (size_t off = 0; off < line.size();) {
      ssize_t n = write(to_.get(), line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ErrnoStatus("write to", "fs helper");
      off += static_cast<size_t>(n);
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kHelperTimeoutMs);
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string reply = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return reply;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Internal("wait for", "fs helper", "no answer in 120 s");
      pollfd p{from_.get(), POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
        return ErrnoStatus("poll", "fs helper");
      char chunk[4096];
      ssize_t n = read(from_.get(), chunk, sizeof chunk);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return Internal("read from", "fs helper", "it ended without an answer");
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  pid_t pid_ = -1;
  UniqueFd to_, from_;
  std::string buf_;
};

}  // namespace

Result<isolation::FsPolicyStats> ApplyFsPolicy(pid_t agent_pid, int agent_pidfd, int agent_exe,
                                               const isolation::FsPolicy& policy) {
  UniqueFd upper = WARREN_TRY(OpenKept(agent_pid, agent::kStagingDirFd, "upper"));
  // Started only when needed (an empty policy just clears the flags).
  std::optional<Helper> helper;
  isolation::FsApplySteps steps;
  steps.check = [&](const isolation::FsPolicy& p) -> Status {
    helper.emplace(WARREN_TRY(Helper::Start(agent_exe, agent_pidfd)));
    return agent::DecodeFsDone(WARREN_TRY(helper->Ask(agent::EncodeFsCheck(p))));
  };
  steps.prepare = [&](const isolation::FsPolicy& p) -> Result<isolation::FsPrepared> {
    return agent::DecodeFsPrepareReply(WARREN_TRY(helper->Ask(agent::EncodeFsPrepare(p))));
  };
  steps.sever = [&](const std::vector<std::string>& paths) -> Status {
    return agent::DecodeFsDone(WARREN_TRY(helper->Ask(agent::EncodeFsSever({paths}))));
  };
  try {
    return isolation::ApplyFsPolicyToUpper(upper.get(), policy, steps);
  } catch (const std::exception& e) {  // a reply we could not parse, say: never the daemon's end
    return Internal("apply filesystem policy", "sandbox", e.what());
  }
}

Result<isolation::ChangeReport> ReadFsChanges(pid_t agent_pid, const std::string& under,
                                              size_t limit) {
  UniqueFd upper = WARREN_TRY(OpenKept(agent_pid, agent::kStagingDirFd, "upper"));
  auto shm = OpenKept(agent_pid, agent::kStagingDirFd, "shm");
  std::vector<UniqueFd> layers;
  std::vector<int> fds;
  for (int i = 0; i < agent::kMaxKeptLayers; ++i) {
    const std::string p =
        "/proc/" + std::to_string(agent_pid) + "/fd/" + std::to_string(agent::kFirstLayerFd + i);
    UniqueFd kept(open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!kept && errno == ENOENT) break;
    if (!kept) return ErrnoStatus("open kept layer", p);
    UniqueFd dir(openat(kept.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return ErrnoStatus("open kept layer", p);
    fds.push_back(dir.get());
    layers.push_back(std::move(dir));
  }
  return isolation::ReadChanges(upper.get(), shm.ok() ? shm->get() : -1, fds, under, limit);
}

Status WriteSnapshotTree(pid_t agent_pid, int dst_dirfd, bool with_top_layer,
                         const isolation::LayerTreeOptions& opts,
                         isolation::LayerTreeStats* stats) {
  if (with_top_layer) {
    const std::string p =
        "/proc/" + std::to_string(agent_pid) + "/fd/" + std::to_string(agent::kFirstLayerFd);
    UniqueFd kept(open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!kept) return ErrnoStatus("open kept layer", p);
    UniqueFd top(openat(kept.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!top) return ErrnoStatus("open kept layer", p);
    WARREN_RETURN_IF_ERROR(isolation::ApplyLayerTree(top.get(), dst_dirfd, opts, stats));
  }
  UniqueFd upper = WARREN_TRY(OpenKept(agent_pid, agent::kStagingDirFd, "upper"));
  return isolation::ApplyLayerTree(upper.get(), dst_dirfd, opts, stats);
}

}  // namespace warren::runtime
