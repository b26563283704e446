#include "agent/vm_init.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "agent/agent.h"
#include "agent/frame_relay.h"
#include "agent/protocol.h"
#include "isolation/net_loopback.h"
#include "isolation/rootfs.h"
#include "sys/mount_api.h"
#include "sys/unix_socket.h"

namespace warren::agent {
namespace {

std::string ReadSmall(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

Status WriteSmall(const std::string& path, const std::string& data) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return ErrnoStatus("write", path);
  return Status::Ok();
}

// Whether a PCI device of class 03 (display controller) is present: a vm with a screen.
bool HasDisplayDevice() {
  DIR* d = opendir("/sys/bus/pci/devices");
  if (!d) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream cls(std::string("/sys/bus/pci/devices/") + e->d_name + "/class");
    std::string c;
    if (cls >> c && c.rfind("0x03", 0) == 0) found = true;
  }
  closedir(d);
  return found;
}

Status LoadModules(const char* order_file) {
  std::ifstream order(order_file);
  if (!order) return Status::Ok();  // a kernel with everything built in
  std::string name;
  while (std::getline(order, name)) {
    if (name.empty()) continue;
    const std::string path = "/lib/modules/" + name;
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return ErrnoStatus("open module", path);
    if (syscall(SYS_finit_module, fd.get(), "", 0) != 0 && errno != EEXIST)
      return ErrnoStatus("load module", name);
  }
  return Status::Ok();
}

// The port's device node: /sys/class/virtio-ports/vportNpM/name holds the name QEMU gave it.
Result<std::string> FindAgentPort() {
  for (int tries = 0; tries < 500; ++tries) {
    if (DIR* d = opendir("/sys/class/virtio-ports")) {
      std::string found;
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const std::string dev = e->d_name;
        if (ReadSmall("/sys/class/virtio-ports/" + dev + "/name") == kAgentPortName)
          found = "/dev/" + dev;
      }
      closedir(d);
      if (!found.empty() && access(found.c_str(), F_OK) == 0) return found;
    }
    usleep(10000);
  }
  return Status(Code::kNotFound, "find virtio port", kAgentPortName, "no such port after 5 s");
}

}  // namespace

namespace {

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
      continue;
    }
    if (n < 0) return ErrnoStatus("write", "agent port");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// The relay process. A session is one connection to the agent; a node that adopts this VM
// after a restart starts a new one (the agent then waits for its `resume`).
[[noreturn]] void RelayLoop(const std::string& port, const std::string& socket_path,
                            UniqueFd first) {
  UniqueFd stream(open(port.c_str(), O_RDWR | O_CLOEXEC));
  if (!stream) _exit(1);
  UniqueFd pkt = std::move(first);
  std::string initial;
  for (;;) {
    RelayOptions o;
    o.watch_adopt = true;
    o.stream_reconnects = true;
    o.initial = std::move(initial);
    std::string leftover;
    o.leftover = &leftover;
    Status st = RelayFrames(stream.get(), pkt.get(), o);
    if (!IsAdoptRestart(st)) {
      if (!st.ok()) fprintf(stderr, "warren-agent relay: %s\n", st.ToString().c_str());
      _exit(st.ok() ? 0 : 1);
    }
    pkt.Reset();  // the agent sees the old session end
    for (int tries = 0; !pkt && tries < 500; ++tries) {
      if (auto c = sys::ConnectUnix(socket_path, SOCK_SEQPACKET); c.ok())
        pkt = std::move(*c);
      else
        usleep(10000);
    }
    if (!pkt || !WriteAll(stream.get(), kSyncFrame).ok()) _exit(1);
    initial = std::move(leftover);
  }
}

}  // namespace

Status VmInit(UniqueFd* listener, pid_t* relay_pid) {
  for (const char* d : {"/proc", "/sys", "/dev", "/run"}) mkdir(d, 0755);
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return ErrnoStatus("mount proc", "/proc");
  if (mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return ErrnoStatus("mount sysfs", "/sys");
  if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755") != 0)
    return ErrnoStatus("mount devtmpfs", "/dev");
  WARREN_RETURN_IF_ERROR(LoadModules(kModuleOrderFile));
  if (HasDisplayDevice()) WARREN_RETURN_IF_ERROR(LoadModules(kDisplayModuleOrderFile));
  // Work that is the same for every sandbox is done here, before `hello`: a template VM is
  // saved after it, so restored VMs start with it done (under TCG each step costs ms).
  WARREN_RETURN_IF_ERROR(PrepareVmCommandsCgroup());
  WARREN_RETURN_IF_ERROR(isolation::BringUpLoopback());
  WARREN_RETURN_IF_ERROR(OpenVmAgentChannel(kInitAgentSocket, listener, relay_pid));
  return Send(kControlFd, Message{{{"t", "hello"}}, ""});
}

Status OpenVmAgentChannel(const std::string& socket_path, UniqueFd* listener, pid_t* relay_pid) {
  const std::string port = WARREN_TRY(FindAgentPort());
  // Every fd here lives above kControlFd, which the agent's connection takes.
  auto high = [](int fd) {
    if (fd < 0) return fd;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    return h;
  };
  UniqueFd l(high(WARREN_TRY(sys::ListenUnix(socket_path, SOCK_SEQPACKET)).Release()));
  if (!l) return ErrnoStatus("move listener", socket_path);
  // The first session: the relay's end connected now, the agent's accepted below.
  UniqueFd first(high(WARREN_TRY(sys::ConnectUnix(socket_path, SOCK_SEQPACKET)).Release()));
  if (!first) return ErrnoStatus("move connection", socket_path);
  int c = high(accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (c < 0) return ErrnoStatus("accept", socket_path);
  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork", "agent relay");
  if (pid == 0) {
    l.Reset();
    close(c);
    RelayLoop(port, socket_path, std::move(first));
  }
  if (relay_pid) *relay_pid = pid;
  first.Reset();
  if (c != kControlFd) {
    if (dup2(c, kControlFd) < 0) return ErrnoStatus("dup2", "agent channel");
    close(c);
  }
  *listener = std::move(l);
  return Status::Ok();
}

Status VmReseed(const std::string& seed_hex, int64_t now_ns) {
  if (now_ns > 0) {
    timespec ts{static_cast<time_t>(now_ns / 1000000000), static_cast<long>(now_ns % 1000000000)};
    if (clock_settime(CLOCK_REALTIME, &ts) != 0) return ErrnoStatus("clock_settime", "guest clock");
  }
  if (seed_hex.empty()) return Status::Ok();
  std::string seed;
  for (size_t i = 0; i + 1 < seed_hex.size(); i += 2)
    seed.push_back(static_cast<char>(std::stoi(seed_hex.substr(i, 2), nullptr, 16)));
  UniqueFd rnd(open("/dev/urandom", O_WRONLY | O_CLOEXEC));
  if (!rnd) return ErrnoStatus("open", "/dev/urandom");
  std::string buf(sizeof(rand_pool_info) + seed.size(), '\0');
  auto* info = reinterpret_cast<rand_pool_info*>(buf.data());
  info->entropy_count = static_cast<int>(seed.size() * 8);
  info->buf_size = static_cast<int>(seed.size());
  memcpy(info->buf, seed.data(), seed.size());
  if (ioctl(rnd.get(), RNDADDENTROPY, info) != 0)
    return ErrnoStatus("RNDADDENTROPY", "/dev/urandom");
  if (ioctl(rnd.get(), RNDRESEEDCRNG) != 0) return ErrnoStatus("RNDRESEEDCRNG", "/dev/urandom");
  return Status::Ok();
}

Result<std::vector<UniqueFd>> MountVmLayers(const std::vector<std::string>& serials) {
  std::map<std::string, std::string> by_serial;  // serial -> /dev/vdX
  if (DIR* d = opendir("/sys/block")) {
    while (dirent* e = readdir(d)) {
      if (strncmp(e->d_name, "vd", 2) != 0) continue;
      by_serial[ReadSmall(std::string("/sys/block/") + e->d_name + "/serial")] =
          std::string("/dev/") + e->d_name;
    }
    closedir(d);
  }
  std::vector<UniqueFd> out;
  for (const auto& s : serials) {
    auto it = by_serial.find(s);
    if (it == by_serial.end()) return NotFound("layer disk with serial", s);
    {
      UniqueFd dev(open(it->second.c_str(), O_RDONLY | O_CLOEXEC));
      if (!dev) return ErrnoStatus("open", it->second);
      if (ioctl(dev.get(), BLKFLSBUF, 0) != 0) return ErrnoStatus("BLKFLSBUF", it->second);
    }
    auto m = sys::FsMount("erofs", it->second, {{"ro", ""}}, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV);
    if (!m.ok()) return m.status().Context("layer " + s);
    out.push_back(std::move(*m));
  }
  return out;
}

Status PrepareVmCommandsCgroup() {
  const std::string root = kInitCgroupDir;
  mkdir(root.c_str(), 0755);
  if (mount("cgroup2", root.c_str(), "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return ErrnoStatus("mount cgroup2", root);
  WARREN_RETURN_IF_ERROR(WriteSmall(root + "/cgroup.subtree_control", "+memory +pids"));
  const std::string cg = root + "/commands";
  if (mkdir(cg.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", cg);
  return Status::Ok();
}

Result<UniqueFd> MakeVmCommandsCgroup(const std::string& cgroup_root, uint64_t memory_bytes,
                                      uint64_t pids) {
  const std::string cg = cgroup_root + "/commands";
  if (cgroup_root == kInitCgroupDir && access(cg.c_str(), F_OK) != 0)
    WARREN_RETURN_IF_ERROR(PrepareVmCommandsCgroup());
  if (mkdir(cg.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", cg);
  if (memory_bytes)
    WARREN_RETURN_IF_ERROR(WriteSmall(cg + "/memory.max", std::to_string(memory_bytes)));
  if (pids) WARREN_RETURN_IF_ERROR(WriteSmall(cg + "/pids.max", std::to_string(pids)));
  UniqueFd procs(open((cg + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs) return ErrnoStatus("open", cg + "/cgroup.procs");
  return procs;
}

Status MountVmProcAndDev(const std::string& root) {
  const std::string proc = root + "/proc", dev = root + "/dev";
  if (mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return ErrnoStatus("mount proc", proc);
  if (mount("devtmpfs", dev.c_str(), "devtmpfs", MS_NOSUID, "mode=0755") != 0)
    return ErrnoStatus("mount devtmpfs", dev);
  for (const char* d : {"/pts", "/shm"}) mkdir((dev + d).c_str(), 0755);
  if (mount("devpts", (dev + "/pts").c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
            "newinstance,ptmxmode=0666,mode=0620") != 0)
    return ErrnoStatus("mount devpts", dev + "/pts");
  if (mount("shm", (dev + "/shm").c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0)
    return ErrnoStatus("mount shm", dev + "/shm");
  unlink((dev + "/ptmx").c_str());
  if (symlink("pts/ptmx", (dev + "/ptmx").c_str()) != 0)
    return ErrnoStatus("symlink", dev + "/ptmx");
  for (auto [target, name] : {std::pair{"/proc/self/fd", "fd"},
                              {"/proc/self/fd/0", "stdin"},
                              {"/proc/self/fd/1", "stdout"},
                              {"/proc/self/fd/2", "stderr"}})
    (void)symlink(target, (dev + "/" + name).c_str());
  return Status::Ok();
}

Status SwitchRootInto(const std::string& new_root) {
  if (chdir(new_root.c_str()) != 0) return ErrnoStatus("chdir", new_root);
  if (mount(".", "/", nullptr, MS_MOVE, nullptr) != 0) return ErrnoStatus("move root", new_root);
  if (chroot(".") != 0) return ErrnoStatus("chroot", new_root);
  if (chdir("/") != 0) return ErrnoStatus("chdir", "/");
  return Status::Ok();
}

}  // namespace warren::agent

namespace warren::agent {
namespace {

constexpr const char* kServiceDir = "/run/warren";
constexpr const char* kServiceUnit = R"([Unit]
Description=Warren sandbox agent: the node's channel into this VM
DefaultDependencies=no

[Service]
ExecStart=/run/warren/warren-agent --vm-service /run/warren/setup.json
KillMode=process
OOMScoreAdjust=-1000
StandardError=journal+console
)";

Status WriteNewFile(const std::string& path, std::string_view data, mode_t mode) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return ErrnoStatus("create", path);
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return ErrnoStatus("write", path);
  return Status::Ok();
}

}  // namespace

bool ImageBootsSystemd() {
  char init[PATH_MAX];
  return realpath(kVmSystemInit, init) && access(init, X_OK) == 0 &&
         std::string_view(init).ends_with("/systemd");
}

Status InstallVmAgentService(const std::string& setup_doc) {
  // Checked by the caller too; a failure here still reaches the node.
  if (!ImageBootsSystemd())
    return Status(Code::kInvalid, "boot the image's init", kVmSystemInit, "is not systemd");
  // A /run of our own (systemd keeps a /run it finds mounted): the agent, its setup and a
  // runtime unit live there, so the image's files are not touched.
  if (mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=20%,nr_inodes=800k") !=
      0)
    return ErrnoStatus("mount tmpfs", "/run");
  for (const char* d : {kServiceDir, "/run/systemd", "/run/systemd/system",
                        "/run/systemd/system/sysinit.target.wants"})
    if (mkdir(d, 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", d);
  chmod(kServiceDir, 0700);
  {
    UniqueFd self(open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
    if (!self) return ErrnoStatus("open", "/proc/self/exe");
    const std::string dst = std::string(kServiceDir) + "/warren-agent";
    UniqueFd out(open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700));
    if (!out) return ErrnoStatus("create", dst);
    struct stat sb;
    if (fstat(self.get(), &sb) != 0) return ErrnoStatus("stat", "/proc/self/exe");
    for (off_t left = sb.st_size; left > 0;) {
      ssize_t n = sendfile(out.get(), self.get(), nullptr,
                           static_cast<size_t>(left));  // initramfs -> tmpfs
      if (n <= 0) return ErrnoStatus("copy", dst);
      left -= n;
    }
  }
  WARREN_RETURN_IF_ERROR(WriteNewFile(std::string(kServiceDir) + "/setup.json", setup_doc, 0600));
  WARREN_RETURN_IF_ERROR(
      WriteNewFile("/run/systemd/system/warren-agent.service", kServiceUnit, 0644));
  // Wanted by sysinit.target, without default dependencies: started among the first units,
  // not after the whole boot.
  if (symlink("../warren-agent.service",
              "/run/systemd/system/sysinit.target.wants/warren-agent.service") != 0)
    return ErrnoStatus("symlink", "sysinit.target.wants/warren-agent.service");
  return Status::Ok();
}

void ExecVmSystemInit(pid_t relay_pid) {
  // The relay sees its session end and exits; what it wrote went out whole (frames are
  // written complete), so the service's agent starts on a clean stream.
  close(kControlFd);
  if (relay_pid > 0) waitpid(relay_pid, nullptr, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  char* const argv[] = {const_cast<char*>(kVmSystemInit), nullptr};
  char* const envp[] = {const_cast<char*>("TERM=linux"), nullptr};
  execve(kVmSystemInit, argv, envp);
  fprintf(stderr, "warren-agent: exec %s: %s\n", kVmSystemInit, strerror(errno));
}

Status RehearseVmSetup() {
  auto layers = WARREN_TRY(MountVmLayers({"layer0"}));
  isolation::RootfsPlan plan;
  plan.layers = std::move(layers);
  plan.disk_bytes = 16 << 20;
  std::string root;
  Status st = isolation::BuildRootfs(plan, &root);
  if (st.ok()) st = MountVmProcAndDev(root);
  if (st.ok()) {
    // An exec (of ourselves, which exits at once): the kernel's exec, mmap and fault paths.
    pid_t pid = fork();
    if (pid == 0) {
      execl("/init", "warren-agent", kWarmExecFlag, nullptr);
      _exit(127);
    }
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
  if (chdir("/") != 0) return ErrnoStatus("chdir", "/");
  if (umount2(isolation::kStagingDir, MNT_DETACH) != 0 && st.ok())
    st = ErrnoStatus("unmount", isolation::kStagingDir);
  return st;
}

}  // namespace warren::agent
