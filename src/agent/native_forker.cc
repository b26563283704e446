#include "agent/native_forker.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "agent/call_worker.h"
#include "agent/protocol.h"
#include "base/unique_fd.h"
#include "isolation/call_setup.h"
#include "sys/code_huge_pages.h"
#include "sys/fd_io.h"
#include "sys/fd_passing.h"

namespace warren::agent {
namespace {

constexpr size_t kPipes = 5;
// Where the worker's pipe ends go in pid 1: request, stdin, stdout, stderr, report.
constexpr int kTargets[kPipes] = {3, 0, 1, 2, 4};

// Pid 1's first steps, before the call's own: its net namespace, its fds in place and nothing
// else of the forker's (not its socket, with which a call could ask for workers).
[[noreturn]] void StartWorker(const NativeForkerConfig& cfg, uint32_t uid, int pipes[kPipes],
                              int netns) {
  if (netns >= 0 && setns(netns, CLONE_NEWNET) != 0) {
    const std::string why = std::string("worker setup: setns net: ") + strerror(errno);
    sys::WriteFull(pipes[4], EncodeFrame({{"error", why}}));
    _exit(1);
  }
  // The pipe ends are above 9 (see Serve), so no dup2 here overwrites one not yet placed.
  for (size_t i = 0; i < kPipes; ++i)
    if (dup2(pipes[i], kTargets[i]) < 0) _exit(1);
  syscall(SYS_close_range, 5u, ~0u, 0u);
  const CallWorkerParams params{uid, cfg.tmp_bytes, cfg.setup_flags, cfg.root_flags, cfg.seccomp};
  RunCallWorker(params);
}

// Moves `fd` above the numbers pid 1 places its pipes on (0-4) and the ones it keeps.
int AboveNine(int fd) {
  if (fd >= 10) return fd;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return high;
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

int StartNativeForker(const NativeForkerConfig& cfg) {
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
  Serve(sock, own);
}

}  // namespace warren::agent
