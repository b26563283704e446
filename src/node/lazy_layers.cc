#include "node/lazy_layers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "sys/fuse_abort.h"

namespace warren::node {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

bool IsFuseMount(const std::string& path) {
  struct statfs sf;
  return statfs(path.c_str(), &sf) == 0 && sf.f_type == kFuseSuperMagic;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool Exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

}  // namespace

LazyLayers::LazyLayers(LazyLayersOptions opts, FailFn fail, PromoteFn promote)
    : opts_(std::move(opts)), fail_(std::move(fail)), promote_(std::move(promote)) {}

Result<std::unique_ptr<LazyLayers>> LazyLayers::Start(const LazyLayersOptions& opts, FailFn fail,
                                                      PromoteFn promote) {
  std::unique_ptr<LazyLayers> l(new LazyLayers(opts, std::move(fail), std::move(promote)));
  for (const std::string& d : {opts.run_dir, l->Mountpoint()})
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", d);
  if (!l->Adopt()) {
    l->DetachMount();
    WARREN_RETURN_IF_ERROR(l->Spawn());
  }
  l->watcher_ = std::thread([p = l.get()] { p->Watch(); });
  l->opener_ = std::thread([p = l.get()] { p->OpenLoop(); });
  if (l->promote_) l->promoter_ = std::thread([p = l.get()] { p->PromoteLoop(); });
  return l;
}

LazyLayers::~LazyLayers() { StopThreads(/*opener=*/true); }

void LazyLayers::StopThreads(bool opener) {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (promoter_.joinable()) promoter_.join();
  if (opener && opener_.joinable()) opener_.join();
}

void LazyLayers::AbortConnection() {
  // Every request pending ends with an error; a mount left busy is DetachMount's, later.
  if (Status st = sys::AbortFuseConnection(Mountpoint()); !st.ok())
    spdlog::warn("blobfsd: {}", st.ToString());
}

namespace {

// Whether process `pid`'s main thread has exited (a zombie) while others may live on: a
// daemon killed with a thread asleep in the kernel. Its pidfd reports the exit only once
// every thread is gone.
bool LeaderExited(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

void LazyLayers::OpenAhead(const std::string& digest) {
  if (digest.rfind("sha256:", 0) != 0) return;
  {
    MutexLock lock(&mu_);
    if (!up_ || stop_) return;  // the mount opens it, or fails, as without
    to_open_.push_back(digest.substr(7));
  }
  cv_.notify_all();
}

void LazyLayers::OpenLoop() {
  for (;;) {
    std::string hex;
    {
      MutexLock lock(&mu_);
      while (!stop_ && to_open_.empty()) lock.Wait(cv_);
      if (stop_) return;
      hex = std::move(to_open_.front());
      to_open_.pop_front();
    }
    // The lookup is the open; once done, the kernel keeps the name for an hour, so later
    // creates' stats of it reach no daemon. Its failure is the mount's to report.
    struct stat st;
    (void)stat((Mountpoint() + "/" + hex).c_str(), &st);
  }
}

void LazyLayers::PromoteLoop() {
  for (;;) {
    std::vector<std::string> layers;
    {
      MutexLock lock(&mu_);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!stop_ && std::chrono::steady_clock::now() < until) lock.WaitUntil(cv_, until);
      if (stop_) return;
      for (const auto& l : stats_.layers)
        if (l.read_bytes > 0) layers.push_back(l.layer);
    }
    for (const auto& l : layers) promote_(l);
  }
}

void LazyLayers::DetachMount() {
  // Lazily: EROFS mounts still hold the dead daemon's files until their sandboxes go. A dead
  // FUSE mount fails statfs (ENOTCONN), so no check first: detach until nothing is mounted
  // there (EINVAL).
  for (int i = 0; i < 8; ++i)
    if (umount2(Mountpoint().c_str(), MNT_DETACH) != 0) break;
}

bool LazyLayers::Adopt() {
  std::ifstream in(PidFile());
  pid_t pid = -1;
  if (!(in >> pid) || pid <= 0) return false;
  UniqueFd fd(PidfdOpen(pid));
  if (!fd || !IsFuseMount(Mountpoint())) return false;
  auto stats = ReadStats();
  if (!stats.ok() || stats->pid != pid) return false;
  spdlog::info("blobfsd: adopted the running daemon (pid {})", pid);
  MutexLock lock(&mu_);
  pid_ = pid;
  child_ = false;
  pidfd_ = std::move(fd);
  up_ = true;
  stats_ = *stats;
  for (const auto& l : stats_.layers) errors_seen_[l.layer] = l.errors;
  return true;
}

Status LazyLayers::Spawn() {
  const std::string log = opts_.run_dir + "/log";
  std::vector<std::string> args = {
      "warren",     "blobfsd", "--store",    opts_.store_root, "--source",
      opts_.source, "--mount", Mountpoint(), "--cache-size",   std::to_string(opts_.cache_bytes)};
  if (!opts_.publish.empty()) {
    args.push_back("--publish");
    args.push_back(opts_.publish);
  }
  if (!opts_.fill_page_cache) args.push_back("--no-fill-page-cache");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  UniqueFd log_fd(open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log_fd) return ErrnoStatus("open", log);
  const pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork", "blobfsd");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec (the node is multithreaded). A
    // session of its own: the node's death (or its terminal's) does not take it along.
    setsid();
    // The node blocks the signals it sigwaits for, and exec keeps the mask: unblock them, or
    // the daemon would never see the SIGTERM that stops it.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    dup2(log_fd.get(), 1);
    dup2(log_fd.get(), 2);
    syscall(SYS_close_range, 3, ~0u, 0);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  UniqueFd fd(PidfdOpen(pid));
  if (!fd) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return ErrnoStatus("pidfd_open", "blobfsd");
  }
  {
    std::ofstream out(PidFile(), std::ios::trunc);
    out << pid << "\n";
  }
  {
    MutexLock lock(&mu_);
    pid_ = pid;
    child_ = true;
    pidfd_ = std::move(fd);
  }
  Status st = WaitMounted(pid);
  if (!st.ok()) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    MutexLock lock(&mu_);
    pid_ = -1;
    pidfd_.Reset();
    return st;
  }
  {
    MutexLock lock(&mu_);
    up_ = true;
    errors_seen_.clear();
    stats_ = {};
  }
  cv_.notify_all();  // creates waiting in DevicePath
  spdlog::info("blobfsd: started (pid {}), chunked layers load on demand from {}", pid,
               opts_.source);
  return Status::Ok();
}

Status LazyLayers::WaitMounted(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    if (IsFuseMount(Mountpoint())) return Status::Ok();
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return Internal("start blobfsd", Mountpoint(),
                      "it exited before mounting (see " + opts_.run_dir + "/log)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Internal("start blobfsd", Mountpoint(), "it did not mount within 10 s");
}

Result<blobfs::BlobfsStats> LazyLayers::ReadStats() {
  const std::string path = Mountpoint() + "/.stats";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", ".stats of blobfsd");
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read", ".stats of blobfsd");
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return blobfs::DecodeStats(text);
}

Result<std::string> LazyLayers::DevicePath(const std::string& digest) {
  if (digest.rfind("sha256:", 0) != 0) return Invalid("bad digest", digest);
  MutexLock lock(&mu_);
  // A restart takes a fraction of a second: a create that arrives during one waits for it
  // rather than failing, and gets kUnavailable only if the daemon stays down.
  const auto until = std::chrono::steady_clock::now() + kRestartWait;
  while (!up_ && !stop_ && std::chrono::steady_clock::now() < until) lock.WaitUntil(cv_, until);
  if (!up_)
    return Status(Code::kUnavailable, "mount chunked layer", digest,
                  "the node's block daemon (blobfsd) is restarting");
  return Mountpoint() + "/" + digest.substr(7);
}

blobfs::BlobfsStats LazyLayers::Stats() {
  MutexLock lock(&mu_);
  return stats_;
}

pid_t LazyLayers::pid() {
  MutexLock lock(&mu_);
  return pid_;
}

void LazyLayers::Watch() {
  double backoff_s = 0.5;
  for (;;) {
    {
      MutexLock lock(&mu_);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (!stop_ && std::chrono::steady_clock::now() < until) lock.WaitUntil(cv_, until);
      if (stop_) return;
    }
    bool died = false;
    std::string how;
    pid_t dying = -1;
    {
      MutexLock lock(&mu_);
      if (up_ && pidfd_ && !Exited(pidfd_.get()) && LeaderExited(pid_)) dying = pid_;
    }
    if (dying > 0) {
      // Killed or crashed, but a thread of it sleeps on in the kernel (a page cache store
      // waiting for a read that only the dead daemon would answer): ending the connection
      // ends that read, and the process with it. The next look sees it gone.
      spdlog::error("blobfsd (pid {}) is dying with a thread stuck: aborting its connection",
                    dying);
      AbortConnection();
    }
    {
      MutexLock lock(&mu_);
      if (up_ && pidfd_ && Exited(pidfd_.get())) {
        died = true;
        up_ = false;
        int status = 0;
        if (child_ && waitpid(pid_, &status, WNOHANG) == pid_)
          how = WIFSIGNALED(status)
                    ? std::string("killed by signal ") + std::to_string(WTERMSIG(status))
                    : "exited with " + std::to_string(WEXITSTATUS(status));
        else
          how = "exited";
        pidfd_.Reset();
      }
    }
    if (died) {
      const std::string reason = "the node's block daemon for on-demand layers (blobfsd) " + how +
                                 ": reads of its layers fail";
      spdlog::error("{}; failing the sandboxes using them and restarting it", reason);
      DetachMount();
      fail_("", reason);
      restarts_++;
    }
    bool up;
    {
      MutexLock lock(&mu_);
      up = up_;
    }
    if (!up) {
      Status st = Spawn();
      if (!st.ok()) {
        spdlog::error("restart blobfsd: {} (again in {:.1f} s)", st.ToString(), backoff_s);
        MutexLock lock(&mu_);
        const auto until = std::chrono::steady_clock::now() +
                           std::chrono::milliseconds(static_cast<int>(backoff_s * 1000));
        while (!stop_ && std::chrono::steady_clock::now() < until) lock.WaitUntil(cv_, until);
        backoff_s = std::min(backoff_s * 2, 30.0);
      } else {
        backoff_s = 0.5;
      }
      continue;
    }
    auto stats = ReadStats();
    if (!stats.ok()) continue;  // a death shows on the pidfd next round
    std::vector<std::pair<std::string, std::string>> failed;
    {
      MutexLock lock(&mu_);
      for (const auto& l : stats->layers) {
        uint64_t& seen = errors_seen_[l.layer];
        if (l.errors > seen) failed.emplace_back(l.layer, l.last_error);
        seen = l.errors;
      }
      stats_ = std::move(*stats);
    }
    for (const auto& [layer, why] : failed)
      fail_(layer, "reading layer " + layer + " failed: " + why);
  }
}

void LazyLayers::Shutdown() {
  StopThreads(/*opener=*/false);  // its lookup may wait on the daemon: joined once it is gone
  pid_t pid;
  bool child;
  {
    MutexLock lock(&mu_);
    pid = pid_;
    child = child_;
    up_ = false;
    pid_ = -1;
  }
  if (pid > 0) {
    kill(pid, SIGTERM);
    // Ten seconds to unmount and save its traces, then it is killed: a node's stop never
    // hangs on its daemon.
    bool gone = false;
    for (int i = 0; i < 1000 && !gone; ++i) {
      gone = child ? waitpid(pid, nullptr, WNOHANG) == pid : kill(pid, 0) != 0;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!gone) {
      spdlog::warn("blobfsd (pid {}) ignored SIGTERM for 10 s: killing it", pid);
      // First its connection: a thread of it asleep in a page cache store would outlive a
      // SIGKILL (and the process with it) until the read holding that page ends.
      AbortConnection();
      kill(pid, SIGKILL);
      if (child) waitpid(pid, nullptr, 0);
    }
  }
  if (opener_.joinable()) opener_.join();
  DetachMount();
  unlink(PidFile().c_str());
}

}  // namespace warren::node
