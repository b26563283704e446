#include "agent/native_forker.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "agent/call_worker.h"
#include "agent/protocol.h"
#include "base/unique_fd.h"
#include "isolation/call_setup.h"
#include "sys/code_huge_pages.h"
#include "sys/copy_at_clone.h"
#include "sys/fd_io.h"
#include "sys/fd_passing.h"

namespace warren::agent {
namespace {

constexpr size_t kPipes = 5;
// Where the worker's pipe ends go in pid 1: request, stdin, stdout, stderr, report.
constexpr int kTargets[kPipes] = {3, 0, 1, 2, 4};

// Pid 1's first steps, before the call's own: its net namespace, its fds in place and nothing
// else of the forker's (not its socket, with which a call could ask for workers).
[[noreturn]] void StartWorker(const NativeForkerConfig& cfg, uint32_t uid, const int pipes[kPipes],
                              int netns, bool sample = false) {
  if (netns >= 0 && setns(netns, CLONE_NEWNET) != 0) {
    const std::string why = std::string("worker setup: setns net: ") + strerror(errno);
    sys::WriteFull(pipes[4], EncodeFrame({{"error", why}}));
    _exit(1);
  }
  // The pipe ends are above 9 (see Serve), so no dup2 here overwrites one not yet placed.
  for (size_t i = 0; i < kPipes; ++i)
    if (dup2(pipes[i], kTargets[i]) < 0) _exit(1);
  syscall(SYS_close_range, 5u, ~0u, 0u);
  const CallWorkerParams params{uid,         cfg.tmp_bytes, cfg.setup_flags, cfg.root_flags,
                                cfg.seccomp, sample};
  RunCallWorker(params);
}

// Moves `fd` above the numbers pid 1 places its pipes on (0-4) and the ones it keeps.
int AboveNine(int fd) {
  if (fd >= 10) return fd;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return high;
}

// The sample run (NativeForkerConfig::sample), before any call is here: a worker made as Serve
// makes one, fed the sample request from pipes of our own. After its report it lists the pages
// it wrote; we pin those we have, so every later clone copies them at once instead of taking a
// copy-on-write fault in the worker for each (and one in the forker for each it writes again
// after a clone). See sys/copy_at_clone.h.
CopiedAtClone LearnHotPages(const NativeForkerConfig& cfg) {
  CopiedAtClone out;
  if (cfg.sample.empty() || cfg.sample_uid == 0 || cfg.sample.size() > 65536) {
    out.why = "no sample run";
    return out;
  }
  int p[kPipes][2];  // request, stdin, stdout, stderr, report: as the dispatcher's
  size_t made = 0;
  for (; made < kPipes; ++made)
    if (pipe2(p[made], O_CLOEXEC) != 0) break;
  std::vector<UniqueFd> ours;  // everything, closed on the way out
  for (size_t i = 0; i < made; ++i) {
    p[i][0] = AboveNine(p[i][0]);  // (StartWorker's dup2s need them there)
    p[i][1] = AboveNine(p[i][1]);
    ours.emplace_back(p[i][0]);
    ours.emplace_back(p[i][1]);
  }
  if (made < kPipes) {
    out.why = "pipe";
    return out;
  }
  sys::WriteFull(p[0][1], cfg.sample);  // it fits the pipe: written before the clone
  int pidfd = -1;
  const long pid = syscall(SYS_clone,
                           CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID | CLONE_NEWNET |
                               CLONE_PIDFD | SIGCHLD,
                           nullptr, &pidfd, nullptr, nullptr);
  if (pid == 0) {
    const int theirs[kPipes] = {p[0][0], p[1][0], p[2][1], p[3][1], p[4][1]};
    StartWorker(cfg, cfg.sample_uid, theirs, -1, true);
  }
  UniqueFd worker(pidfd);
  // Our copies of its ends go (its stdin then ends at once; its output stays unread in the
  // pipes, whose read ends we keep until it is done: a closed one would fail its writes).
  for (int fd : {p[0][0], p[1][0], p[1][1], p[2][1], p[3][1], p[4][1]})
    for (auto& f : ours)
      if (f.get() == fd) f.Reset();
  if (pid < 0) {
    out.why = std::string("clone: ") + strerror(errno);
    return out;
  }
  // Its report frame, then the list, until the pipe ends (at most 10 s: it runs our code).
  std::string got;
  char buf[65536];
  pollfd pf{p[4][0], POLLIN, 0};
  for (;;) {
    const int r = poll(&pf, 1, 10000);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    const ssize_t n = read(p[4][0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  syscall(SYS_pidfd_send_signal, worker.get(), SIGKILL, nullptr, 0);  // the kernel reaps it
  uint32_t total = 0;
  if (got.size() >= 4) memcpy(&total, got.data(), 4);
  const size_t at = 4 + static_cast<size_t>(total);  // the list follows its report's frame
  const char* why = "";
  const long pinned = warren_copy_at_clone_from_list(got.data() + std::min(at, got.size()),
                                                     got.size() > at ? got.size() - at : 0, &why);
  if (pinned < 0)
    out.why = why;
  else
    out.pages = static_cast<uint64_t>(pinned);
  return out;
}

[[noreturn]] void Serve(int sock, const NativeForkerConfig& cfg) {
  for (;;) {
    std::string msg;
    std::vector<UniqueFd> fds;
    if (!sys::RecvWithFds(sock, sizeof(ForkRequest), &msg, &fds).ok() || msg.empty())
      _exit(0);  // the dispatcher is gone
    ForkRequest rq;
    ForkAnswer answer;
    int pidfd = -1;
    if (msg.size() != sizeof rq) {
      answer.error = EPROTO;
    } else {
      memcpy(&rq, msg.data(), sizeof rq);
      if (fds.size() != kPipes + (rq.join_netns ? 1 : 0)) answer.error = EPROTO;
    }
    int pipes[kPipes];
    for (size_t i = 0; answer.error == 0 && i < kPipes; ++i) {
      pipes[i] = AboveNine(fds[i].Release());
      fds[i] = UniqueFd(pipes[i]);
      if (pipes[i] < 0) answer.error = errno;
    }
    if (answer.error == 0) {
      const int netns = rq.join_netns ? fds[kPipes].get() : -1;
      unsigned long flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID | CLONE_PIDFD;
      if (netns < 0) flags |= CLONE_NEWNET;
      // The raw clone: glibc's clone() wants a function and a stack, and its fork() takes no
      // flags. Without CLONE_VM and with no stack given, the child goes on here like a fork's.
      const long pid = syscall(SYS_clone, flags | SIGCHLD, nullptr, &pidfd, nullptr, nullptr);
      if (pid == 0) StartWorker(cfg, rq.uid, pipes, netns);
      if (pid < 0)
        answer.error = errno;
      else
        answer.pid = static_cast<int32_t>(pid);
    }
    const std::string out(reinterpret_cast<const char*>(&answer), sizeof answer);
    std::vector<int> give;
    if (answer.error == 0) give.push_back(pidfd);
    const bool sent = sys::SendWithFds(sock, out, give).ok();
    if (pidfd >= 0) close(pidfd);
    if (!sent) _exit(0);
  }  // `fds` closes the forker's copies of the pipe ends and the net namespace
}

}  // namespace

int StartNativeForker(const NativeForkerConfig& cfg, CopiedAtClone* learned) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  const pid_t dispatcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(sv[0]);
    close(sv[1]);
    errno = err;
    return -1;
  }
  if (pid > 0) {
    close(sv[1]);
    // Its first message, once its sample run is done: "PAGES WHY".
    char hello[512];
    ssize_t n;
    do n = recv(sv[0], hello, sizeof hello - 1, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
      const int err = n < 0 ? errno : EPIPE;
      close(sv[0]);
      errno = err;
      return -1;
    }
    hello[n] = 0;
    char* why = nullptr;
    learned->pages = strtoull(hello, &why, 10);
    learned->why = why && *why == ' ' ? why + 1 : "";
    return sv[0];
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != dispatcher) _exit(0);
  // The node's channel is the dispatcher's alone: /dev/null on stdin and stdout (stderr, the
  // runner's log, stays).
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0) _exit(1);
  close(null);
  // Nothing else of the dispatcher's: its end of our socket and whatever it had open.
  const int sock = sv[1];
  if (sock > 3) syscall(SYS_close_range, 3u, static_cast<unsigned>(sock - 1), 0u);
  syscall(SYS_close_range, static_cast<unsigned>(sock + 1), ~0u, 0u);
  // Workers are reaped by the kernel (the dispatcher watches their pidfds); a SIGUSR1 sent to a
  // new pid 1 before it has its handler must not end it: blocked here, pid 1 unblocks it.
  struct sigaction reap {};
  reap.sa_handler = SIG_DFL;
  reap.sa_flags = SA_NOCLDWAIT;
  sigaction(SIGCHLD, &reap, nullptr);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, nullptr);
  // Should the runner run out of memory, a call goes first, never the dispatcher (all share the
  // runner's cgroup): every worker inherits this.
  if (int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    sys::WriteFull(fd, "1000");
    close(fd);
  }
  warren_code_to_huge_pages();  // see sys/code_huge_pages.h
  NativeForkerConfig own = cfg;
  own.setup_flags = warren_call_prepare_root(cfg.setup_flags, cfg.root_flags);
  if (own.setup_flags & WARREN_CALL_ROOT_DONE) warren_call_detach_covered(own.setup_flags);
  const CopiedAtClone hot = LearnHotPages(own);
  own.sample.clear();
  own.sample.shrink_to_fit();
  const std::string hello = std::to_string(hot.pages) + " " + hot.why;
  if (send(sock, hello.data(), hello.size(), MSG_NOSIGNAL) < 0) _exit(0);
  Serve(sock, own);
}

}  // namespace warren::agent
