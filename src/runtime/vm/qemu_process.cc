#include "runtime/vm/qemu_process.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/if_tun.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "base/cleanup.h"
#include "sys/clone3.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace warren::runtime::vm {
namespace {

// Host directories QEMU has no business seeing (state of the node and of other users).
constexpr const char* kHiddenDirs[] = {"/run", "/tmp", "/var",   "/home", "/root",
                                       "/srv", "/mnt", "/media", "/boot"};

// Child side: report the failing step and errno to the parent, then exit.
[[noreturn]] void Fail(int report_fd, int step) {
  int msg[2] = {step, errno};
  (void)!write(report_fd, msg, sizeof msg);
  _exit(126);
}

bool SetUp(int sock, const char* name) {
  ifreq ifr{};
  strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return false;
  ifr.ifr_flags |= IFF_UP;
  return ioctl(sock, SIOCSIFFLAGS, &ifr) == 0;
}

// In the child, in the sandbox's network namespace, still root: the VM's TAP (and bridge).
// Plain ioctls: the child must not allocate or take locks after clone.
int MakeTap(bool bridge_eth0) {
  int tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (tap < 0) return -1;
  ifreq ifr{};
  strncpy(ifr.ifr_name, "tap0", IFNAMSIZ - 1);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  if (ioctl(tap, TUNSETIFF, &ifr) != 0) return -1;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0 || !SetUp(s, "tap0")) return -1;
  if (bridge_eth0) {
    if (ioctl(s, SIOCBRADDBR, "br0") != 0) return -1;
    for (const char* port : {"eth0", "tap0"}) {
      ifreq p{};
      strncpy(p.ifr_name, "br0", IFNAMSIZ - 1);
      p.ifr_ifindex = static_cast<int>(if_nametoindex(port));
      if (p.ifr_ifindex == 0 || ioctl(s, SIOCBRADDIF, &p) != 0) return -1;
    }
    if (!SetUp(s, "br0")) return -1;
  }
  close(s);
  return tap;
}

}  // namespace

Result<QemuProcess> SpawnJailedQemu(const QemuLaunch& l,
                                    const std::function<Status(pid_t)>& before_exec) {
  if (l.uid == 0 || l.gid == 0) return Invalid("QEMU must not run as root", "qemu launch");
  std::vector<std::string> argv_s = {l.binary};
  argv_s.insert(argv_s.end(), l.args.begin(), l.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string path_env = "PATH=/usr/bin:/bin";
  char* envp[] = {path_env.data(), nullptr};

  int console[2], sync[2], report[2];
  if (pipe2(console, O_CLOEXEC) != 0) return ErrnoStatus("pipe", "qemu console");
  UniqueFd con_rd(console[0]), con_wr(console[1]);
  if (pipe2(sync, O_CLOEXEC) != 0) return ErrnoStatus("pipe", "qemu sync");
  UniqueFd sync_rd(sync[0]), sync_wr(sync[1]);
  if (pipe2(report, O_CLOEXEC) != 0) return ErrnoStatus("pipe", "qemu report");
  UniqueFd rep_rd(report[0]), rep_wr(report[1]);

  int pidfd = -1;
  sys::CloneArgs ca;
  ca.flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_PIDFD;
  if (l.netns_fd < 0) ca.flags |= CLONE_NEWNET;
  ca.pidfd = &pidfd;
  if (l.cgroup_v2_fd >= 0) {
    ca.flags |= CLONE_INTO_CGROUP;
    ca.cgroup_fd = l.cgroup_v2_fd;
  }
  std::vector<int> high;
  high.reserve(l.fds.size());  // the child must not allocate: another thread may hold malloc's lock
  pid_t pid = sys::Clone3(ca);
  if (pid == 0) {
    // Every fd the child still uses goes above the range the passed fds are placed in first,
    // so placing them cannot clobber one (the parent's numbers are arbitrary).
    const int floor = kFirstFd + static_cast<int>(l.fds.size()) + 8;
    const int rep = fcntl(rep_wr.get(), F_DUPFD_CLOEXEC, floor);
    const int sync_fd = fcntl(sync_rd.get(), F_DUPFD_CLOEXEC, floor);
    const int con = fcntl(con_wr.get(), F_DUPFD_CLOEXEC, floor);
    const int netns = l.netns_fd >= 0 ? fcntl(l.netns_fd, F_DUPFD_CLOEXEC, floor) : -1;
    if (rep < 0 || sync_fd < 0 || con < 0 || (l.netns_fd >= 0 && netns < 0)) _exit(124);
    for (int fd : l.fds) {
      int h = fcntl(fd, F_DUPFD_CLOEXEC, floor);
      if (h < 0) Fail(rep, 1);
      high.push_back(h);
    }
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(con, 1) < 0 || dup2(con, 2) < 0) Fail(rep, 2);
    for (size_t i = 0; i < high.size(); ++i)
      if (dup2(high[i], kFirstFd + static_cast<int>(i)) < 0) Fail(rep, 3);  // dup2 clears CLOEXEC
    char go;
    if (read(sync_fd, &go, 1) != 1) _exit(125);  // the parent gave up
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Fail(rep, 4);
    for (const char* d : kHiddenDirs) {
      struct stat sb;
      if (lstat(d, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
      if (mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=0755") != 0)
        Fail(rep, 5);
    }
    // A /proc of the new pid namespace: QEMU sees only itself (its fds stay reachable
    // through /proc/self/fd, which is how it opens the kernel and initramfs).
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
      Fail(rep, 6);
    if (netns >= 0 && setns(netns, CLONE_NEWNET) != 0) Fail(rep, 7);
    if (l.tap_fd >= 0) {
      int tap = MakeTap(l.bridge_eth0);
      if (tap < 0 || dup2(tap, l.tap_fd) < 0) Fail(rep, 10);
      close(tap);
    }
    rlimit core{0, 0};
    setrlimit(RLIMIT_CORE, &core);
    // Raw calls: glibc's setgroups/setres[ug]id would signal every thread of the daemon's
    // that glibc still lists here (clone3 is not fork: nothing reset that list) and wait for
    // each, forever.
    if (sys::RawSyscall(SYS_setgroups, 0, 0) != 0 ||
        sys::RawSyscall(SYS_setresgid, l.gid, l.gid, l.gid) != 0 ||
        sys::RawSyscall(SYS_setresuid, l.uid, l.uid, l.uid) != 0)
      Fail(rep, 8);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(rep, 9);
    syscall(SYS_close_range, static_cast<unsigned>(kFirstFd + l.fds.size()), ~0u,
            CLOSE_RANGE_CLOEXEC);
    execve(l.binary.c_str(), argv.data(), envp);
    Fail(rep, 11);
  }
  if (pid < 0) return ErrnoStatus("clone3", "qemu");
  QemuProcess p;
  p.pid = pid;
  p.pidfd.Reset(pidfd);
  Cleanup kill([&] { KillQemu(p); });
  con_wr.Reset();
  sync_rd.Reset();
  rep_wr.Reset();
  if (before_exec) WARREN_RETURN_IF_ERROR(before_exec(pid));
  if (write(sync_wr.get(), "g", 1) != 1) return ErrnoStatus("release", "qemu child");
  sync_wr.Reset();
  // The report pipe closes on exec (CLOEXEC) or carries the failing step.
  int msg[2];
  ssize_t n;
  do {
    n = read(rep_rd.get(), msg, sizeof msg);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof msg) {
    static const char* kSteps[] = {"",
                                   "dup fds",
                                   "stdio",
                                   "place fds",
                                   "private mounts",
                                   "hide host dirs",
                                   "mount proc",
                                   "enter network namespace",
                                   "drop to uid",
                                   "no_new_privs",
                                   "make the VM's tap device"};
    std::string step = msg[0] > 0 && msg[0] < 11 ? kSteps[msg[0]] : "exec";
    return ErrnoStatus("start qemu: " + step, l.binary, msg[1]);
  }
  p.console = std::move(con_rd);
  kill.Cancel();
  return p;
}

void KillQemu(QemuProcess& p) {
  if (p.pid <= 0) return;
  if (p.pidfd) syscall(SYS_pidfd_send_signal, p.pidfd.get(), SIGKILL, nullptr, 0);
  siginfo_t info;
  if (p.pidfd && p.adopted) {
    // Not our child: its pidfd turns readable when it has exited.
    pollfd w{p.pidfd.get(), POLLIN, 0};
    while (poll(&w, 1, 10000) < 0 && errno == EINTR) {
    }
  } else if (p.pidfd) {
    while (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(p.pidfd.get()), &info,
                  WEXITED | __WALL) != 0 &&
           errno == EINTR) {
    }
  }
  p.pid = -1;
  p.pidfd.Reset();
}

}  // namespace warren::runtime::vm
