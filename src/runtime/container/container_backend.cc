#include "runtime/container/container_backend.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "agent/agent.h"
#include "agent/protocol.h"
#include "agent/setup_messages.h"
#include "base/cleanup.h"
#include "isolation/cgroup.h"
#include "isolation/rootfs.h"
#include "isolation/userns.h"
#include "runtime/container/fs_guard.h"
#include "runtime/setup_message.h"
#include "sys/clone3.h"
#include "sys/fd_passing.h"
#include "sys/mount_api.h"
#include "sys/pidfd_ns.h"
#include "sys/sched_priority.h"
#include "sys/unix_socket.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace warren::runtime {
namespace {

constexpr int kReadyTimeoutMs = 15000;

int PidfdSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// Kills the sandbox's init and waits for it. When PID 1 of a PID namespace dies the kernel
// kills every other process in it and its exit completes only after they are gone, so once
// waitid returns the sandbox has no process left.
void KillAndReap(int pidfd) {
  PidfdSignal(pidfd, SIGKILL);
  siginfo_t info;
  while (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info,
                WEXITED | __WALL) != 0 &&
         errno == EINTR) {
  }
}

// The same for an init we adopted after a restart: not our child (the old daemon's), so we
// cannot reap it; its pidfd turns readable when it has exited.
void KillAndWait(int pidfd) {
  PidfdSignal(pidfd, SIGKILL);
  pollfd p{pidfd, POLLIN, 0};
  while (poll(&p, 1, 10000) < 0 && errno == EINTR) {
  }
}

// Where a sandbox's agent listens for a node that restarted, and what the node needs to find
// it again: /run/warren/<cgroup parent>/<id>.{sock,json}. /run is right: a reboot ends the
// sandboxes too.
std::string RunDir(const std::string& cgroup_parent) { return "/run/warren/" + cgroup_parent; }

// What a restarted node needs to find a sandbox again: RUN_DIR/ID.json, written whole or
// not at all.
Status WriteRuntimeFile(const std::string& run_base, const std::string& id, pid_t pid,
                        uint32_t slot, const std::string& cgroup) {
  nlohmann::json rt = {{"id", id}, {"pid", pid}, {"slot", slot}, {"cgroup", cgroup}};
  std::string tmp = run_base + ".json.tmp", s = rt.dump();
  UniqueFd f(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!f || write(f.get(), s.data(), s.size()) != static_cast<ssize_t>(s.size()) ||
      rename(tmp.c_str(), (run_base + ".json").c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus("write", run_base + ".json", err);
  }
  return Status::Ok();
}

class ContainerInstance : public Instance {
 public:
  ContainerInstance(pid_t pid, UniqueFd pidfd, isolation::Cgroup cgroup, std::string cgroup_name,
                    isolation::UidSlot slot, std::vector<std::shared_ptr<image::LayerMount>> layers,
                    UniqueFd control, std::string run_dir, std::string id, bool adopted,
                    int agent_exe)
      : adopted_(adopted),
        agent_exe_(agent_exe),
        run_dir_(std::move(run_dir)),
        run_base_(run_dir_ + "/" + id),
        cgroup_name_(std::move(cgroup_name)),
        pid_(pid),
        host_uid_(slot.range().host_base),
        pidfd_(std::move(pidfd)),
        cgroup_(std::move(cgroup)),
        slot_(std::move(slot)),
        layers_(std::move(layers)),
        control_(std::move(control)) {}
  ~ContainerInstance() override { (void)Destroy(); }

  UniqueFd TakeControlSocket() override { return std::move(control_); }
  int host_pid() const override { return pid_; }
  Result<UniqueFd> OpenNetns() override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status(Code::kNotFound, "open network namespace", "sandbox", "gone");
    return sys::OpenNetnsOfPidfd(pidfd_.get());
  }
  std::string cgroup_name() const override { return cgroup_name_; }
  isolation::CgroupPaths cgroup_paths() const override {
    std::lock_guard lock(mu_);
    return cgroup_.paths();
  }

  Status Claim(const ClaimSpec& spec) override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status(Code::kConflict, "claim", spec.id, "deleted");
    WARREN_RETURN_IF_ERROR(
        cgroup_.SetLimits({spec.memory_bytes, spec.pids, spec.cpus}).Context("claim " + spec.id));
    // The agent (and so every command it starts) back at normal priority.
    WARREN_RETURN_IF_ERROR(sys::SetNormalPriority(pid_).Context("claim " + spec.id));
    // Found by its new name after a restart: the runtime file first (it names the cgroup),
    // then the socket; the old runtime file goes last.
    const std::string base = run_dir_ + "/" + spec.id;
    WARREN_RETURN_IF_ERROR(WriteRuntimeFile(base, spec.id, pid_, slot_.slot(), cgroup_name_));
    if (rename((run_base_ + ".sock").c_str(), (base + ".sock").c_str()) != 0) {
      int err = errno;
      unlink((base + ".json").c_str());
      return ErrnoStatus("rename", run_base_ + ".sock", err);
    }
    unlink((run_base_ + ".json").c_str());
    run_base_ = base;
    return Status::Ok();
  }
  uint32_t host_uid() const override { return host_uid_; }

  Status Pause() override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status(Code::kConflict, "pause", "sandbox", "deleted");
    return cgroup_.Freeze(true);
  }
  Status Resume() override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status(Code::kConflict, "resume", "sandbox", "deleted");
    return cgroup_.Freeze(false);
  }

  Status SetFilesystemPolicy(const isolation::FsPolicy& policy) override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status(Code::kConflict, "set filesystem policy", "sandbox", "deleted");
    // Every process stops while the policy changes (a paused sandbox stays paused).
    auto frozen = WARREN_TRY(FreezeForNode());
    if (!AgentAlive())
      return Status(Code::kConflict, "set filesystem policy", "sandbox", "its init is gone");
    auto stats = ApplyFsPolicy(pid_, pidfd_.get(), agent_exe_, policy);
    if (!stats.ok()) {
      // The node's own failures (a host errno) are not the tenant's not-found or forbidden.
      const Code c = stats.status().code();
      if (c == Code::kInvalid || c == Code::kQuota || c == Code::kConflict ||
          c == Code::kUnavailable)
        return stats.status();
      return Internal("set filesystem policy", "sandbox", stats.status().ToString());
    }
    spdlog::debug("filesystem policy of {}: {} flags changed, {} files severed", run_base_,
                  stats->flags_changed, stats->severed);
    return Status::Ok();
  }

  Result<isolation::ChangeReport> ReadChanges(const std::string& under, size_t limit) override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status(Code::kConflict, "read changes", "sandbox", "deleted");
    // Frozen while it is read: nothing can be renamed or swapped under the walk.
    auto frozen = WARREN_TRY(FreezeForNode());
    auto r = ReadFsChanges(pid_, under, limit);
    if (!r.ok() || !AgentAlive())
      return r.ok() ? Status(Code::kConflict, "read changes", "sandbox", "its init is gone")
                    : r.status();
    return r;
  }

  Status WriteSnapshotTree(int dst_dirfd, bool with_top_layer,
                           const isolation::LayerTreeOptions& opts,
                           isolation::LayerTreeStats* stats) override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status(Code::kConflict, "snapshot", "sandbox", "deleted");
    auto frozen = WARREN_TRY(FreezeForNode());
    // Its pid is its agent's still (checked again after: the walk goes through /proc/pid).
    if (!AgentAlive()) return Status(Code::kConflict, "snapshot", "sandbox", "its init is gone");
    isolation::LayerTreeOptions shifted = opts;
    shifted.id_base = host_uid_;  // the upper and the layer clones show the sandbox's host ids
    WARREN_RETURN_IF_ERROR(
        runtime::WriteSnapshotTree(pid_, dst_dirfd, with_top_layer, shifted, stats));
    if (!AgentAlive()) return Status(Code::kConflict, "snapshot", "sandbox", "its init is gone");
    return Status::Ok();
  }

  // Freezes the sandbox for a node operation, unless it is paused already (then it stays so):
  // the returned Cleanup thaws it. Called with mu_ held.
  Result<Cleanup> FreezeForNode() {
    const bool paused = cgroup_.Frozen();
    if (!paused) WARREN_RETURN_IF_ERROR(cgroup_.Freeze(true));
    return Cleanup([this, paused] {
      if (!paused) (void)cgroup_.Freeze(false);
    });
  }

  // The agent is still the process pid_ names (its pidfd says so): what was read through
  // /proc/pid_ was its.
  bool AgentAlive() const {
    return syscall(SYS_pidfd_send_signal, pidfd_.get(), 0, nullptr, 0) == 0;
  }

  Status Destroy() override {
    std::lock_guard lock(mu_);
    if (destroyed_) return Status::Ok();
    destroyed_ = true;
    control_.Reset();
    // cgroup.kill first where the host has it: it also catches anything that might have
    // left the PID namespace's reach (nothing should), then init's death takes the rest.
    // A frozen sandbox is thawed so its processes can die.
    (void)cgroup_.Kill();
    (void)cgroup_.Freeze(false);
    if (adopted_)
      KillAndWait(pidfd_.get());
    else
      KillAndReap(pidfd_.get());
    pidfd_.Reset();
    unlink((run_base_ + ".sock").c_str());
    unlink((run_base_ + ".json").c_str());
    Status st = cgroup_.Destroy();
    // The sandbox's mount namespace died with its last process, taking the overlay, the
    // tmpfs upper and the idmapped layer clones along; drop our references to the layers.
    layers_.clear();
    slot_.Reset();
    return st;
  }

 private:
  mutable std::mutex mu_;
  bool destroyed_ = false;
  const bool adopted_;
  const int agent_exe_;  // the backend's agent file (agent_binary.h), run as the fs helper
  const std::string run_dir_;
  std::string run_base_;  // RUN_DIR/ID
  const std::string cgroup_name_;
  pid_t pid_;
  uint32_t host_uid_;
  UniqueFd pidfd_;
  isolation::Cgroup cgroup_;
  isolation::UidSlot slot_;
  std::vector<std::shared_ptr<image::LayerMount>> layers_;
  UniqueFd control_;
};

constexpr size_t kInitChildStack = 64 * 1024;

struct InitChildArgs {
  int agent_end, sync_rd, agent_exe;
  char** argv;
  char** envp;
};

// The sandbox's first process until it execs the agent. It runs in the daemon's memory
// (sys::Clone3Vm): raw system calls only, nothing that touches errno, glibc state or the heap.
int SandboxInitChild(void* p) {
  const InitChildArgs& c = *static_cast<InitChildArgs*>(p);
  using sys::RawSyscall;
  // Move our three fds to 3, 4, 5 via high numbers so no dup2 clobbers another.
  long a = RawSyscall(SYS_fcntl, c.agent_end, F_DUPFD, 10);
  long s = RawSyscall(SYS_fcntl, c.sync_rd, F_DUPFD, 10);
  long m = RawSyscall(SYS_fcntl, c.agent_exe, F_DUPFD, 10);
  long null = RawSyscall(SYS_openat, AT_FDCWD, reinterpret_cast<long>("/dev/null"), O_RDWR);
  if (a < 0 || s < 0 || m < 0 || null < 0) return 120;
  for (long fd = 0; fd < 3; ++fd) RawSyscall(SYS_dup2, null, fd);
  if (RawSyscall(SYS_dup2, a, agent::kControlFd) < 0 || RawSyscall(SYS_dup2, s, 4) < 0 ||
      RawSyscall(SYS_dup2, m, agent::kSelfExeFd) < 0)
    return 121;
  RawSyscall(SYS_close_range, 6, ~0u, 0);
  // Held here until the parent has written our id maps and cgroups: exec without a uid
  // mapping would drop our capabilities in the new user namespace.
  char go;
  if (RawSyscall(SYS_read, 4, reinterpret_cast<long>(&go), 1) != 1)
    return 122;  // the parent gave up
  RawSyscall(SYS_close, 4);
  // We still carry the parent's host-root credentials, which the new namespace cannot
  // map. Become the namespace's root (host uid range base) so that exec keeps a full
  // capability set inside the user namespace — and nothing at all outside it. (Raw calls:
  // glibc's would broadcast the change to the daemon's threads.)
  if (RawSyscall(SYS_setgroups, 0, 0) != 0 || RawSyscall(SYS_setresgid, 0, 0, 0) != 0 ||
      RawSyscall(SYS_setresuid, 0, 0, 0) != 0)
    return 123;
  static char kEmpty[] = "";
  RawSyscall(SYS_execveat, agent::kSelfExeFd, reinterpret_cast<long>(kEmpty),
             reinterpret_cast<long>(c.argv), reinterpret_cast<long>(c.envp), AT_EMPTY_PATH);
  return 127;
}

Status WriteProcFile(pid_t pid, const char* name, const std::string& value) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd || write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return ErrnoStatus("write", path);
  return Status::Ok();
}

}  // namespace

Status PrepareHostDirs() {
  // Sandbox roots (unprivileged host uids) must traverse to the staging dir; it stays empty
  // on the host, each sandbox mounting its own tmpfs there in its own mount namespace.
  struct Dir {
    const char* path;
    mode_t mode;
  };
  for (Dir d : {Dir{"/run/warren", 0711}, Dir{isolation::kStagingDir, 0755},
                Dir{"/run/warren/uid-blocks", 0700}}) {
    if (mkdir(d.path, d.mode) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", d.path);
    if (chmod(d.path, d.mode) != 0) return ErrnoStatus("chmod", d.path);
  }
  return Status::Ok();
}

ContainerBackend::ContainerBackend(UniqueFd agent_exe_fd, image::ErofsMountCache* mounts,
                                   isolation::UidAllocator* uids, std::string cgroup_parent,
                                   std::string seccomp_bpf, std::string runner_seccomp_bpf)
    : agent_exe_fd_(std::move(agent_exe_fd)),
      mounts_(mounts),
      uids_(uids),
      cgroup_parent_(std::move(cgroup_parent)),
      seccomp_bpf_(std::move(seccomp_bpf)),
      runner_seccomp_bpf_(std::move(runner_seccomp_bpf)),
      host_netns_(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) {}

Result<std::unique_ptr<Instance>> ContainerBackend::Create(const SandboxConfig& cfg) {
  // 1. Identity: a host uid/gid range of our own; root inside is its first id.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kIdentity, cfg.id));
  auto slot_no = uids_->Allocate();
  if (!slot_no) return Status(Code::kQuota, "allocate uid range", cfg.id, "all ranges in use");
  isolation::UidSlot slot(uids_, *slot_no);

  // 2. Layers: each blob mounted once per host, shared.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kLayers, cfg.id));
  std::vector<std::shared_ptr<image::LayerMount>> layers;
  for (const LayerRef& l : cfg.layers)
    layers.push_back(
        WARREN_TRY(mounts_->Acquire(l.digest, l.blob_path, l.device_path, l.readahead_kb)));

  // 3. Cgroups with limits, before any process exists, so none runs unlimited.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kCgroup, cfg.id));
  isolation::CgroupLimits lim{cfg.memory_bytes, cfg.pids, cfg.cpus};
  isolation::Cgroup cgroup = WARREN_TRY(isolation::Cgroup::Create(cgroup_parent_, cfg.id, lim));

  // 4. Channels: the agent's control socket and a pipe that holds the child until the
  //    parent has written its id maps and cgroups (it must not exec before: exec without a
  //    uid mapping would drop its capabilities in the new user namespace).
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kChannels, cfg.id));
  int sv[2], sync[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return ErrnoStatus("socketpair", cfg.id);
  UniqueFd node_end(sv[0]), agent_end(sv[1]);
  if (pipe2(sync, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", cfg.id);
  UniqueFd sync_rd(sync[0]), sync_wr(sync[1]);

  // Everything the child touches is prepared here (see SandboxInitChild).
  static char kArg0[] = "warren-agent";
  static char* argv[] = {kArg0, nullptr};
  static char* envp[] = {nullptr};
  InitChildArgs child{agent_end.get(), sync_rd.get(), agent_exe_fd_.get(), argv, envp};
  // The child's stack: it runs in our memory until its exec (declared before the cleanup
  // that kills and reaps it, so it outlives the child on every path).
  std::unique_ptr<char[]> child_stack(new char[kInitChildStack]);

  // 5. Spawn into new user, mount, pid, net, uts, ipc and cgroup namespaces, directly into
  //    the v2 cgroup where there is one. A network namespace the node made instead of a new
  //    one is entered by this thread just for the clone (setns is per thread; the child
  //    inherits it), since the child, once in its own user namespace, could not enter it.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kClone, cfg.id));
  int pidfd = -1;
  sys::CloneArgs ca;
  ca.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_PIDFD;
  if (cfg.netns_fd >= 0 && !host_netns_) return ErrnoStatus("open", "/proc/self/ns/net", EBADF);
  if (cfg.netns_fd < 0)
    ca.flags |= CLONE_NEWNET;
  else if (setns(cfg.netns_fd, CLONE_NEWNET) != 0)
    return ErrnoStatus("setns", "network namespace of " + cfg.id);
  ca.pidfd = &pidfd;
  if (cgroup.v2_fd() >= 0) {
    ca.flags |= CLONE_INTO_CGROUP;
    ca.cgroup_fd = cgroup.v2_fd();
  }
  pid_t pid = sys::Clone3Vm(ca, SandboxInitChild, &child, child_stack.get(), kInitChildStack);
  if (pid < 0 && errno == ENOSYS) {  // no trampoline for this architecture: a forked child
    pid = sys::Clone3(ca);
    if (pid == 0) _exit(SandboxInitChild(&child));
  }
  const int clone_errno = errno;
  // A warm pool's sandbox sets up at the lowest priority (its agent and anything it forks
  // inherit this until Claim restores it). The filler thread is there already; another caller
  // may not be.
  if (pid > 0 && cfg.background) (void)sys::SetBackgroundPriority(pid);
  if (cfg.netns_fd >= 0 && setns(host_netns_.get(), CLONE_NEWNET) != 0) {
    // This thread would serve everything after in the sandbox's namespace: never go on.
    spdlog::critical("setns back to the host network namespace: {}", strerror(errno));
    abort();
  }
  if (pid < 0) return ErrnoStatus("clone3", cfg.id, clone_errno);
  UniqueFd pidfd_owner(pidfd);
  // From here a failure must kill and reap the child before the cgroup can be removed.
  Cleanup kill_child([&] { KillAndReap(pidfd_owner.get()); });
  agent_end.Reset();
  sync_rd.Reset();

  // 6. Parent half of each facility, in order: id maps (needed by the idmapped mounts and
  //    by the child's exec), v1 cgroups (before the child runs anything), OOM priority.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kIdMaps, cfg.id));
  isolation::IdRange range = slot.range();
  WARREN_RETURN_IF_ERROR(isolation::WriteIdMaps(pid, range).Context("create " + cfg.id));
  WARREN_RETURN_IF_ERROR(cgroup.AttachV1(pid).Context("create " + cfg.id));

  // 7. Idmapped, read-only clones of the layer mounts for this sandbox's user namespace.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kIdmappedMounts, cfg.id));
  UniqueFd userns = WARREN_TRY(isolation::OpenUserNs(pid));
  std::vector<UniqueFd> clones;
  std::vector<int> layer_fds;
  for (auto& l : layers) {
    UniqueFd c = WARREN_TRY(sys::CloneMount(l->fd.get()));
    WARREN_RETURN_IF_ERROR(sys::IdmapMount(c.get(), userns.get(), MOUNT_ATTR_RDONLY)
                               .Context("idmap layer " + l->digest));
    layer_fds.push_back(c.get());
    clones.push_back(std::move(c));
  }

  // The commands' cgroup, passed along with the layers (agent/setup_messages.h: fd slots).
  UniqueFd commands_procs = WARREN_TRY(cgroup.OpenCommandsProcs());
  // Last, the socket a restarted node reconnects through (bound on the host, where the
  // sandbox cannot see it; only root can reach the directory).
  const std::string run_dir = RunDir(cgroup_parent_), run_base = run_dir + "/" + cfg.id;
  if (mkdir(run_dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", run_dir);
  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!listener) return ErrnoStatus("socket", cfg.id);
  const std::string sock_path = run_base + ".sock";
  sockaddr_un addr = WARREN_TRY(sys::UnixAddr(sock_path));
  unlink(sock_path.c_str());
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener.get(), 4) != 0)
    return ErrnoStatus("bind agent socket", sock_path);
  Cleanup rm_sock([&] { unlink(sock_path.c_str()); });

  // 8. Release the child into the agent, then hand it the setup and the layer mounts.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kSetup, cfg.id));
  if (write(sync_wr.get(), "g", 1) != 1) return ErrnoStatus("release child", cfg.id);
  sync_wr.Reset();
  const agent::SetupMessage setup = ContainerSetupMessage(
      cfg, {.hardened = !seccomp_bpf_.empty(), .commands_cgroup = commands_procs.valid()});
  const std::vector<int> fds = WARREN_TRY(
      agent::SetupFdOrder(setup, layer_fds, cfg.sysfs_fd, commands_procs.get(), listener.get()));
  const agent::Message msg{agent::ToJson(setup),
                           cfg.fncall_runner ? runner_seccomp_bpf_ : seccomp_bpf_};
  WARREN_RETURN_IF_ERROR(
      sys::SendWithFds(node_end.get(), agent::Encode(msg), fds).Context("setup " + cfg.id));
  clones.clear();

  // 9. Handshake.
  WARREN_RETURN_IF_ERROR(CheckFault(faults_, CreateStep::kHandshake, cfg.id));
  auto reply = agent::RecvWithin(node_end.get(), kReadyTimeoutMs, "wait for agent ready");
  if (!reply.ok()) return reply.status().Context("create " + cfg.id);
  std::string t = reply->header.value("t", "");
  if (t == "setup_failed")
    return Internal("create sandbox", cfg.id,
                    "agent setup failed: " + reply->header.value("error", ""));
  if (t != "ready") return Internal("create sandbox", cfg.id, "unexpected agent message " + t);
  if (auto ready = agent::ParseReady(reply->header); !ready.ok())
    return Internal("create sandbox", cfg.id, ready.status().ToString());

  // The agent should never be the OOM victim inside its cgroup. Written only now that it runs
  // in a memory of its own: before its exec it shared the daemon's, and the kernel applies
  // oom_score_adj to every process of a shared memory. Lowering needs CAP_SYS_RESOURCE, which
  // root lacks on some hosts (this build VM); every command gets a score 998 above the agent's
  // anyway (see exec_child.cc).
  (void)WriteProcFile(pid, "oom_score_adj", "-998");
  WARREN_RETURN_IF_ERROR(WriteRuntimeFile(run_base, cfg.id, pid, slot.slot(), cfg.id));
  rm_sock.Cancel();
  kill_child.Cancel();
  cgroup.CloseCloneFd();
  return std::unique_ptr<Instance>(
      new ContainerInstance(pid, std::move(pidfd_owner), std::move(cgroup), cfg.id, std::move(slot),
                            std::move(layers), std::move(node_end), run_dir, cfg.id,
                            /*adopted=*/false, agent_exe_fd_.get()));
}

Result<std::unique_ptr<Instance>> ContainerBackend::Adopt(const std::string& id) {
  const std::string run_base = RunDir(cgroup_parent_) + "/" + id;
  std::string doc;
  {
    UniqueFd f(open((run_base + ".json").c_str(), O_RDONLY | O_CLOEXEC));
    if (!f) return ErrnoStatus("open", run_base + ".json");
    char buf[4096];
    ssize_t n = read(f.get(), buf, sizeof buf);
    if (n <= 0) return Invalid("empty runtime file", run_base + ".json");
    doc.assign(buf, static_cast<size_t>(n));
  }
  nlohmann::json rt = nlohmann::json::parse(doc, nullptr, false);
  if (!rt.is_object() || rt.value("id", "") != id)
    return Invalid("bad runtime file", run_base + ".json");
  const pid_t pid = rt.value("pid", 0);
  const uint32_t slot_no = rt.value("slot", 0u);
  // A sandbox taken from the warm pool keeps the cgroup of its pool name.
  const std::string cgroup_name = rt.value("cgroup", id);
  if (cgroup_name.empty() || cgroup_name.find('/') != std::string::npos || cgroup_name[0] == '.')
    return Invalid("bad cgroup name in runtime file", run_base + ".json");
  // The cgroup, then the pid, then a check that the pid is still our sandbox's init (and not
  // a recycled number): it must sit in the sandbox's cgroup.
  isolation::Cgroup cgroup = WARREN_TRY(isolation::Cgroup::Open(cgroup_parent_, cgroup_name));
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) return ErrnoStatus("pidfd_open", id);
  if (!cgroup.Holds(pid)) return Status(Code::kNotFound, "adopt", id, "its init is gone");
  if (!uids_->Claim(slot_no)) return Status(Code::kConflict, "adopt", id, "its uid range is taken");
  isolation::UidSlot slot(uids_, slot_no);
  UniqueFd sock(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock) return ErrnoStatus("socket", id);
  const std::string sock_path = run_base + ".sock";
  sockaddr_un addr = WARREN_TRY(sys::UnixAddr(sock_path));
  if (connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return ErrnoStatus("connect to agent", sock_path);
  return std::unique_ptr<Instance>(new ContainerInstance(
      pid, std::move(pidfd), std::move(cgroup), cgroup_name, std::move(slot), {}, std::move(sock),
      RunDir(cgroup_parent_), id, /*adopted=*/true, agent_exe_fd_.get()));
}

}  // namespace warren::runtime
