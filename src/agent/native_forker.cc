#include "agent/native_forker.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "agent/call_ns_pool.h"
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

// glibc's own: a thread block laid out as pthread_create makes one (static TLS copied from its
// image, the dtv set). GLIBC_PRIVATE, but this binary is static: the glibc it was built with
// is the one it runs with, and ThreadBlocksWork checks the layout we rely on before any use.
extern "C" void* _dl_allocate_tls(void* mem);

// x86-64 glibc's tcbhead_t, the start of a thread block: the words we set in a new one.
constexpr size_t kTcbSelf = 0, kTcbSelf2 = 2, kStackGuard = 5, kPointerGuard = 6;

uintptr_t* ThreadPointer() { return static_cast<uintptr_t*>(__builtin_thread_pointer()); }

// Whether our own thread block has the layout a new one is given below.
bool ThreadBlocksWork() {
#if defined(__x86_64__)
  uintptr_t* tp = ThreadPointer();
  const auto self = reinterpret_cast<uintptr_t>(tp);
  return tp[kTcbSelf] == self && tp[kTcbSelf2] == self;
#else
  return false;
#endif
}

// A thread block of its own for a pid 1 that runs in our memory: errno and every other
// thread-local of the C library are then its own, not ours.
void* NewThreadBlock() {
  auto* tcb = static_cast<uintptr_t*>(_dl_allocate_tls(nullptr));
  if (!tcb) return nullptr;
  const uintptr_t* ours = ThreadPointer();
  tcb[kTcbSelf] = tcb[kTcbSelf2] = reinterpret_cast<uintptr_t>(tcb);
  tcb[kStackGuard] = ours[kStackGuard];  // the stack protector's canary, as compiled code reads it
  tcb[kPointerGuard] = ours[kPointerGuard];  // setjmp's and atexit's pointer mangling
  return tcb;
}

// A pid 1's own part of our memory: its stack, the program's stack until its exec, its room
// (call_worker.h) and its thread block. Taken again once the pid 1 that had it has ended.
struct Pid1Slot {
  char* mem = nullptr;  // guard | stack | guard | spawn stack | room
  void* tls = nullptr;
  int pidfd = -1;                 // ours, while a pid 1 has it
  volatile size_t room_used = 0;  // as that pid 1 says (CallWorkerParams::room_used)
  // What that pid 1 starts from.
  const NativeForkerConfig* cfg = nullptr;
  uint32_t uid = 0;
  int pipes[kPipes] = {};
  // Its call's, while a pid 1 has them (call_ns_pool.h); invalid: the clone made one.
  CallNetns netns;
  CallIpcns ipcns;
};

constexpr size_t kPage = 4096, kPid1Stack = 256 << 10;
constexpr size_t kSlotBytes = kPage + kPid1Stack + kPage + kCallWorkerSpawnStack + kCallWorkerRoom;
constexpr size_t kMaxSlots = 1024;
constexpr size_t kKeptNamespaces = 16;  // of each kind; a runner runs a few calls at once

char* Pid1Stack(const Pid1Slot& s) { return s.mem + kPage; }
char* SpawnStack(const Pid1Slot& s) { return s.mem + kPage + kPid1Stack + kPage; }
char* Room(const Pid1Slot& s) { return SpawnStack(s) + kCallWorkerSpawnStack; }

// Pid 1's first steps, before the call's own: its fds in place and nothing else of the
// forker's (not its socket, with which a call could ask for workers), its net namespace.
[[noreturn]] void StartWorker(Pid1Slot& slot) {
  // The namespaces first: their fds are above the numbers the pipe ends go to.
  const int netns_err = slot.netns.valid() && setns(slot.netns.fd(), CLONE_NEWNET) != 0 ? errno : 0;
  const int ipcns_err = slot.ipcns.valid() && setns(slot.ipcns.fd(), CLONE_NEWIPC) != 0 ? errno : 0;
  // The pipe ends are above 9 (see Serve), so no dup2 here overwrites one not yet placed.
  for (size_t i = 0; i < kPipes; ++i)
    if (dup2(slot.pipes[i], kTargets[i]) < 0) _exit(1);
  syscall(SYS_close_range, 5u, ~0u, 0u);
  if (netns_err) CallWorkerSetupFailed("setns net", netns_err);
  if (ipcns_err) CallWorkerSetupFailed("setns ipc", ipcns_err);
  const NativeForkerConfig& cfg = *slot.cfg;
  CallWorkerParams params{slot.uid, cfg.tmp_bytes, cfg.setup_flags, cfg.root_flags, cfg.seccomp};
  params.room = Room(slot);
  params.room_used = &slot.room_used;
  params.spawn_stack = SpawnStack(slot);
  RunCallWorker(params);
}

extern "C" void __ctype_init(void);  // glibc: a thread's ctype tables (what pthread_create does)

int Pid1Main(void* slot) {
  __ctype_init();
  StartWorker(*static_cast<Pid1Slot*>(slot));
}

// Moves `fd` above the numbers pid 1 places its pipes on (0-4) and the ones it keeps. Only
// where one below is free: the forker keeps them all taken (StartNativeForker).
constexpr int kFirstFreeFd = 10;
int AboveNine(int fd) {
  if (fd >= kFirstFreeFd) return fd;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, kFirstFreeFd);
  close(fd);
  return high;
}

// Why pid 1 may not share our memory here, or null. A program may read its pid 1's memory only
// if that memory is dumpable, and with fs.suid_dumpable 1 a pid 1's change of uid leaves it so
// until its prctl: a window in which another call's program could read every call's.
const char* CannotShare() {
  if (!ThreadBlocksWork()) return "its thread blocks are not glibc's";
  char v[8] = {};
  const int fd = open("/proc/sys/fs/suid_dumpable", O_RDONLY | O_CLOEXEC);
  const ssize_t n = fd >= 0 ? read(fd, v, sizeof v - 1) : -1;
  if (fd >= 0) close(fd);
  if (n <= 0 || v[0] == '1') return "fs.suid_dumpable is 1 (or unreadable)";
  return nullptr;
}

class Forker {
 public:
  explicit Forker(const NativeForkerConfig& cfg)
      : cfg_(cfg), why_not_(CannotShare()), shared_(why_not_ == nullptr) {}

  // How pid 1 is made, for the runner's stats.
  std::string How() const {
    return shared_ ? "pid 1 shares the forker's memory"
                   : std::string("pid 1 copies the forker's memory: ") + why_not_;
  }

  // Pid 1 for one call: 0 and its pid and pidfd (the dispatcher's to have; we keep it open
  // until we see it ended), or an errno.
  int Clone(uint32_t uid, const int pipes[kPipes], pid_t* pid_out, int* pidfd) {
    Pid1Slot* slot = FreeSlot();
    if (!slot) return errno ? errno : EAGAIN;
    slot->cfg = &cfg_;
    slot->uid = uid;
    for (size_t i = 0; i < kPipes; ++i) slot->pipes[i] = pipes[i];
    slot->netns = netns_.Take();
    slot->ipcns = ipcns_.Take();
    int flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWPID | CLONE_PIDFD | SIGCHLD;
    if (!slot->netns.valid()) flags |= CLONE_NEWNET;
    if (!slot->ipcns.valid()) flags |= CLONE_NEWIPC;
    // Shared: no copy of our page tables to make, fault in and tear down for each call (on a
    // guest whose page tables the host shadows, most of what a run cost).
    if (shared_) flags |= CLONE_VM | CLONE_SETTLS;
    int fd = -1;
    const pid_t pid = clone(Pid1Main, Pid1Stack(*slot) + kPid1Stack, flags, slot, &fd,
                            shared_ ? slot->tls : nullptr, nullptr);
    if (pid < 0) {
      const int err = errno;
      netns_.Give(std::move(slot->netns));  // no process was ever in them
      ipcns_.Give(std::move(slot->ipcns));
      return err;
    }
    slot->pidfd = fd;
    *pid_out = pid;
    *pidfd = fd;
    return 0;
  }

 private:
  // A slot no pid 1 has: one whose pid 1 has ended (its pidfd says so only once it is gone
  // with its namespace's every process, so nothing runs on its stacks), or a new one.
  Pid1Slot* FreeSlot() {
    errno = 0;
    // Every ended one is released, so that none holds an fd of ours for long: found with one
    // poll of all the busy slots' pidfds.
    polls_.clear();
    for (const Pid1Slot& s : slots_)
      if (s.pidfd >= 0) polls_.push_back(pollfd{s.pidfd, POLLIN, 0});
    if (!polls_.empty() && poll(polls_.data(), polls_.size(), 0) > 0) {
      size_t k = 0;
      for (Pid1Slot& s : slots_)
        if (s.pidfd >= 0 && polls_[k++].revents) Release(s);
    }
    for (Pid1Slot& s : slots_)
      if (s.pidfd < 0) return &s;
    if (slots_.size() >= kMaxSlots) return nullptr;
    Pid1Slot s;
    void* mem =
        mmap(nullptr, kSlotBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) return nullptr;
    s.mem = static_cast<char*>(mem);
    if (mprotect(Pid1Stack(s), kPid1Stack, PROT_READ | PROT_WRITE) != 0 ||
        mprotect(SpawnStack(s), kCallWorkerSpawnStack + kCallWorkerRoom, PROT_READ | PROT_WRITE) !=
            0 ||
        (shared_ && !(s.tls = NewThreadBlock()))) {
      const int err = errno ? errno : ENOMEM;
      munmap(mem, kSlotBytes);
      errno = err;
      return nullptr;
    }
    slots_.push_back(std::move(s));
    return &slots_.back();
  }

  // A slot whose pid 1 has ended, with every process of its call.
  void Release(Pid1Slot& s) {
    close(s.pidfd);
    s.pidfd = -1;
    netns_.Give(std::move(s.netns));  // each kept if its call left it as new
    ipcns_.Give(std::move(s.ipcns));
    // What a large request used of the room goes back (the first 256 KiB stays warm).
    constexpr size_t kWarm = 256 << 10;
    const size_t said = s.room_used;
    const size_t used = std::min(said, kCallWorkerRoom);
    if (used > kWarm) madvise(Room(s) + kWarm, used - kWarm, MADV_DONTNEED);
    s.room_used = 0;
  }

  const NativeForkerConfig& cfg_;
  const char* const why_not_;
  const bool shared_;
  CallNetnsPool netns_ = MakeCallNetnsPool(kKeptNamespaces);
  CallIpcnsPool ipcns_ = MakeCallIpcnsPool(kKeptNamespaces);
  std::deque<Pid1Slot> slots_;  // a deque: a pid 1 holds a pointer to its slot
  std::vector<pollfd> polls_;   // FreeSlot's, kept for its capacity
};

// Closes `fds`: with one call where they are consecutive numbers, as a request's mostly are
// (each lands on the lowest free number).
void CloseReceived(std::vector<UniqueFd>* fds) {
  int lo = INT_MAX, hi = -1;
  size_t n = 0;
  for (const UniqueFd& f : *fds)
    if (f.valid()) {
      lo = std::min(lo, f.get());
      hi = std::max(hi, f.get());
      ++n;
    }
  if (n > 1 && static_cast<size_t>(hi - lo) + 1 == n &&
      syscall(SYS_close_range, static_cast<unsigned>(lo), static_cast<unsigned>(hi), 0u) == 0)
    for (UniqueFd& f : *fds) (void)f.Release();
  fds->clear();  // closes what is left, one by one
}

[[noreturn]] void Serve(int sock, Forker& forker) {
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
      if (fds.size() != kPipes) answer.error = EPROTO;
    }
    int pipes[kPipes];
    for (size_t i = 0; answer.error == 0 && i < kPipes; ++i) {
      pipes[i] = AboveNine(fds[i].Release());
      fds[i] = UniqueFd(pipes[i]);
      if (pipes[i] < 0) answer.error = errno;
    }
    if (answer.error == 0) {
      pid_t pid = 0;
      answer.error = forker.Clone(rq.uid, pipes, &pid, &pidfd);
      answer.pid = static_cast<int32_t>(pid);
    }
    const std::string out(reinterpret_cast<const char*>(&answer), sizeof answer);
    std::vector<int> give;
    if (answer.error == 0) give.push_back(pidfd);
    if (!sys::SendWithFds(sock, out, give).ok()) _exit(0);
    CloseReceived(&fds);  // our copies of the pipe ends
  }
}

}  // namespace

int StartNativeForker(const NativeForkerConfig& cfg, std::string* how) {
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
    // Its first message, once it serves: how it makes pid 1.
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
    how->assign(hello, static_cast<size_t>(n));
    return sv[0];
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != dispatcher) _exit(0);
  // Nothing of the dispatcher's but our socket: not the node's channel, nor whatever it had
  // open. Every number below 10 but our socket's and stderr's (the runner's log) is then
  // /dev/null, so each fd a request brings (and so each pipe end) lands above the numbers pid 1
  // places its pipes on, with no move to make.
  const int sock = sv[1];
  if (sock > 3) syscall(SYS_close_range, 3u, static_cast<unsigned>(sock - 1), 0u);
  syscall(SYS_close_range, static_cast<unsigned>(sock + 1), ~0u, 0u);
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) _exit(1);
  for (int fd = 0; fd < kFirstFreeFd; ++fd) {
    if (fd == sock || fd == null || (fd == 2 && fcntl(2, F_GETFD) >= 0)) continue;
    if (dup3(null, fd, fd > 2 ? O_CLOEXEC : 0) < 0) _exit(1);
  }
  if (null >= kFirstFreeFd) close(null);
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
  // Our memory is every pid 1's (CLONE_VM): no process of a call may ever open it as its own
  // pid 1's through /proc, from the first clone on (each pid 1 says so again, for a copy).
  prctl(PR_SET_DUMPABLE, 0);
  NativeForkerConfig own = cfg;
  own.setup_flags = warren_call_prepare_root(cfg.setup_flags, cfg.root_flags);
  if (own.setup_flags & WARREN_CALL_ROOT_DONE) warren_call_detach_covered(own.setup_flags);
  Forker forker(own);
  const std::string hello = forker.How();
  if (send(sock, hello.data(), hello.size(), MSG_NOSIGNAL) < 0) _exit(0);
  Serve(sock, forker);
}

}  // namespace warren::agent
