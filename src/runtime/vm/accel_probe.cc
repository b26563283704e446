#include "runtime/vm/accel_probe.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "base/unique_fd.h"

namespace warren::runtime::vm {
namespace {

constexpr uint32_t kLoops = 20'000'000;
// A guest slower than this many times native is not worth using; PVM here is ~1000x.
constexpr double kMaxSlowdown = 20;
constexpr int kDeadlineMs = 1000;

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The same countdown on the host, so the guest's time means something on this machine.
double NativeLoopMs() {
  auto t0 = std::chrono::steady_clock::now();
  volatile uint32_t n = kLoops;
  uint32_t c = n;
  while (c) asm volatile("dec %0" : "+r"(c));
  return Ms(std::chrono::steady_clock::now() - t0);
}

// In the child: one vCPU in real mode running `mov ecx, N; l: dec ecx; jnz l; hlt`.
// Exit code 0 when it reached HLT, 2..9 for the step that failed.
int RunGuestLoop() {
  int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm < 0) return 2;
  if (ioctl(kvm, KVM_GET_API_VERSION, 0) != KVM_API_VERSION) return 3;
  int vm = ioctl(kvm, KVM_CREATE_VM, 0);
  if (vm < 0) return 4;
  const size_t mem_size = 0x10000;
  auto* mem = static_cast<uint8_t*>(
      mmap(nullptr, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) return 5;
  const uint8_t code[] = {0x66,
                          0xB9,
                          static_cast<uint8_t>(kLoops),
                          static_cast<uint8_t>(kLoops >> 8),
                          static_cast<uint8_t>(kLoops >> 16),
                          static_cast<uint8_t>(kLoops >> 24),
                          0x66,
                          0x49,  // dec ecx
                          0x75,
                          0xFC,   // jnz -4
                          0xF4};  // hlt
  memcpy(mem + 0x1000, code, sizeof code);
  kvm_userspace_memory_region region{};
  region.slot = 0;
  region.guest_phys_addr = 0;
  region.memory_size = mem_size;
  region.userspace_addr = reinterpret_cast<uint64_t>(mem);
  if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0) return 6;
  int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
  if (vcpu < 0) return 7;
  int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
  auto* run = static_cast<kvm_run*>(
      mmap(nullptr, static_cast<size_t>(run_size), PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0));
  if (run == MAP_FAILED) return 8;
  kvm_sregs sregs;
  if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0) return 8;
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0) return 8;
  kvm_regs regs{};
  regs.rip = 0x1000;
  regs.rflags = 0x2;
  if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0) return 8;
  for (;;) {
    if (ioctl(vcpu, KVM_RUN, 0) < 0) {
      if (errno == EINTR) continue;
      return 9;
    }
    if (run->exit_reason == KVM_EXIT_HLT) return 0;
    if (run->exit_reason != KVM_EXIT_INTR) return 9;
  }
}

}  // namespace

AccelChoice ChooseAccel(const std::string& force) {
  AccelChoice c;
  if (force == "tcg") {
    c.accel = "tcg";
    c.reason = "forced by configuration";
    return c;
  }
  c.native_loop_ms = NativeLoopMs();
  if (access("/dev/kvm", R_OK | W_OK) != 0) {
    c.accel = force == "kvm" ? "kvm" : "tcg";
    c.reason = "/dev/kvm: " + std::string(strerror(errno));
    return c;
  }
  auto t0 = std::chrono::steady_clock::now();
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // The child is a fork of the daemon, with all its fds (the DNS and proxy sockets among
    // them). A vCPU that never halts keeps it spinning in KVM_RUN: if the daemon dies before
    // it kills the child (kill -9 within the probe's second), the child must go too, and must
    // not hold the daemon's sockets meanwhile: a restarted daemon could not bind them.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    syscall(SYS_close_range, 3u, ~0u, 0u);
    _exit(RunGuestLoop());
  }
  if (pid < 0) {
    c.accel = "tcg";
    c.reason = std::string("fork for the KVM probe: ") + strerror(errno);
    return c;
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  pollfd p{pidfd, POLLIN, 0};
  int r = pidfd >= 0 ? poll(&p, 1, kDeadlineMs) : -1;
  if (r <= 0) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pidfd >= 0) close(pidfd);
  const double elapsed = Ms(std::chrono::steady_clock::now() - t0);
  char buf[256];
  if (r <= 0) {
    snprintf(buf, sizeof buf,
             "a KVM guest loop that takes %.1f ms natively did not finish in %d ms",
             c.native_loop_ms, kDeadlineMs);
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(buf, sizeof buf, "the KVM probe guest failed (step %d)",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  } else {
    c.kvm_loop_ms = elapsed;
    snprintf(buf, sizeof buf, "a guest loop took %.1f ms under KVM, %.1f ms natively", elapsed,
             c.native_loop_ms);
  }
  c.reason = buf;
  const bool fast = c.kvm_loop_ms >= 0 && c.kvm_loop_ms <= kMaxSlowdown * c.native_loop_ms + 50;
  c.accel = force == "kvm" || fast ? "kvm" : "tcg";
  if (force == "kvm") c.reason += " (kvm forced by configuration)";
  return c;
}

}  // namespace warren::runtime::vm
