#include "agent/agent.h"

#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "agent/desktop.h"
#include "agent/desktop_messages.h"
#include "agent/exec_child.h"
#include "agent/fs_helper.h"
#include "agent/protocol.h"
#include "agent/pty.h"
#include "agent/setup_messages.h"
#include "agent/tar_stream.h"
#include "agent/vm_init.h"
#include "agent/vm_net.h"
#include "base/unique_fd.h"
#include "isolation/capabilities.h"
#include "isolation/devices.h"
#include "isolation/fs_apply.h"
#include "isolation/landlock.h"
#include "isolation/net_loopback.h"
#include "isolation/proc_masks.h"
#include "isolation/rootfs.h"
#include "isolation/seccomp_filter.h"
#include "sys/fd_passing.h"

namespace warren::agent {
namespace {

using nlohmann::json;

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// After the command exits, how long we keep reading pipes that a background grandchild
// still holds open before we call the exec finished.
constexpr int64_t kExitGraceMs = 100;

// Input the node sent that a command has not read yet, per command: past it, more input is
// refused (the node answers 429) instead of growing the agent, whose memory the sandbox's
// own cgroup bounds.
constexpr size_t kMaxPendingInput = 1 << 20;

struct Exec {
  std::string id;
  pid_t pid = -1;
  UniqueFd out, err, in;
  std::string pending_stdin;
  bool stdin_eof = false;
  bool tty = false;  // out and in are the pty's master (two descriptors, one watch each)
  // Whether the stdin pipe is watched for EPOLLOUT: only while there is something to write
  // (level-triggered, it would otherwise wake the loop forever while a client sends nothing).
  bool stdin_armed = false;
  int64_t deadline_ms = 0;  // 0: none
  int64_t exited_at_ms = 0;
  uint64_t max_output = 1 << 20;
  bool channel = false;  // a node-internal channel: no output cap, no resend ring
  uint64_t sent[2] = {0, 0};
  // The last bytes sent of each stream, so that a node that restarted (and lost what was in
  // flight on the old socket) can ask for them again: ring[i] holds stream i's bytes from
  // offset sent[i] - ring[i].size().
  std::string ring[2];
  bool truncated[2] = {false, false};
  bool exited = false;
  int status = 0;
  bool timed_out = false;
};

class Agent {
 public:
  int Serve();
  Status Setup();

 private:
  void Reply(json header, std::string payload = "") {
    if (!connected_) return;
    Status st = Send(kControlFd, Message{std::move(header), std::move(payload)});
    if (!st.ok()) Disconnect();
  }
  // The node went away (it died or restarts). Without a listening socket to come back
  // through there is nothing left to serve; with one, the sandbox keeps running: commands
  // go on (their output waits in the pipes, they block when a pipe is full), exits are kept,
  // and everything resumes when a node connects again.
  void Disconnect();
  void Reconnect();
  void HandleResume(Message& m);
  void SendOutput(Exec& e, int which, std::string data);
  void HandleMessage(Message& m);
  void StartExec(Message& m);
  void HandleStdin(Message& m);
  void HandleInput(Message& m);
  void HandleResize(Message& m);
  // A desktop sandbox's screen (agent/desktop.h).
  void HandleDisplay(Message& m);
  void HandleScreen(Message& m);
  void HandleDesktopInput(Message& m);
  void ReplyData(const std::string& id, const std::string& data);
  // How every command starts (environment, limits, cgroup, capabilities), argv aside.
  ChildSpec CommandSpec() const;
  void WriteStdin(Exec& e);
  void HandlePut(Message& m);
  void HandleGet(Message& m);
  void HandleSignal(Message& m);
  void ReadPipe(Exec& e, int which);
  void ReapChildren();
  void HandleAssign(const Message& m);
  void HandleVmRefresh(const Message& m);
  void HandleClock(const Message& m);
  // A microVM's filesystem policy and tamper report: the guest's root is ours, so we do what
  // the node does for a container (runtime/container/fs_guard.h), in our own namespaces.
  void HandleFsPolicy(const Message& m);
  void HandleFsChanges(const Message& m);
  void HandleFsSnapshot(const Message& m);
  void ReplyError(const std::string& id, const Status& st);
  void CheckTimers();
  void MaybeFinish(Exec& e);
  void Watch(int fd, uint32_t events, bool add);
  void Rearm(int fd, uint32_t events);

  UniqueFd epoll_, sigfd_;
  std::map<std::string, std::unique_ptr<Exec>> execs_;
  std::map<int, std::pair<std::string, int>> fd_owner_;  // fd -> (exec id, 0 out|1 err|2 in)
  std::map<std::string, UniqueFd> puts_;
  std::vector<std::string> base_env_;
  uint64_t nofile_ = 4096;
  int oom_score_adj_ = 0;
  UniqueFd commands_cgroup_;  // cgroup.procs of the commands' memory cgroup, if any
  UniqueFd vm_commands_dir_;  // a microVM's commands cgroup (cgroup2), to freeze it
  UniqueFd listen_;           // where a restarted node reconnects (a host path, bound by the node)
  // Recently finished execs, with their exit message and the tail of their output: the exit
  // (and the last output) may have been in flight when the node died.
  struct Finished {
    std::unique_ptr<Exec> exec;
    json exit;
  };
  std::deque<Finished> finished_;
  bool connected_ = true;
  Desktop desktop_;

 public:
  int landlock_abi_ = 0;
  json setup_ms_ = json::object();
  bool full_os_ = false;  // backend vm: Setup prepared the image's own init to take over
  bool microvm_ = false;  // a microVM's agent: the guest's root, unsealed by seccomp
  // The service of a full OS: commands run as root of the machine, every capability kept
  // (the VM is the boundary), as a shell on any machine would.
  bool whole_machine_ = false;
  bool bounding_narrowed_ = false;  // NarrowBoundingSet ran at the seal
  UniqueFd null_fd_;                // /dev/null, every command's stdin by default
  // Backend vm, in the service systemd started: the rest of the setup PID 1 left us.
  Status SetupService(const json& h);
  void AddBaseEnv(const json& env) {
    for (auto& [k, v] : env.items())
      if (v.is_string()) base_env_.push_back(k + "=" + v.get<std::string>());
  }
  // Ours, which each command's is derived from (SpawnChild).
  void ReadOomScoreAdj() {
    if (FILE* f = fopen("/proc/self/oom_score_adj", "re")) {
      if (fscanf(f, "%d", &oom_score_adj_) != 1) oom_score_adj_ = 0;
      fclose(f);
    }
  }
  // A microVM's agent: where the guest's relay connects each session with a host.
  void SetListener(UniqueFd l) {
    if (l) listen_ = std::move(l);
  }
};

std::string ErrText(const char* op, const std::string& obj, int err) {
  return std::string(op) + " `" + obj + "`: " + strerror(err);
}

Status Agent::Setup() {
  std::string data;
  std::vector<UniqueFd> fds;
  Message msg;
  for (;;) {
    WARREN_RETURN_IF_ERROR(sys::RecvWithFds(kControlFd, kMaxMessage, &data, &fds));
    msg = WARREN_TRY(Decode(data));
    // A warm microVM rehearses its setup while it waits (see RehearseVmSetup).
    if (msg.header.value("t", "") != "warmup") break;
    const int64_t t0 = NowMs();
    Status st = RehearseVmSetup();
    WARREN_RETURN_IF_ERROR(
        Send(kControlFd,
             Message{{{"t", "warm"}, {"ms", NowMs() - t0}, {"error", st.ok() ? "" : st.ToString()}},
                     ""}));
  }
  const SetupMessage h = WARREN_TRY(ParseSetup(msg.header));
  SetupFds slots = WARREN_TRY(TakeSetupFds(h, std::move(fds)));
  // (A VM's listener and commands' cgroup are its own: no slot replaces them.)
  if (h.listen) listen_ = std::move(slots.listen);
  if (h.commands_cgroup) commands_cgroup_ = std::move(slots.commands_cgroup);
  UniqueFd sysfs = std::move(slots.sysfs);
  fds = std::move(slots.layers);
  const bool vm = h.vm.has_value();
  full_os_ = vm && h.vm->full_os;
  microvm_ = vm && !full_os_;
  int64_t mark = NowMs();
  // Where setup's time goes (reported with `ready`; under TCG every first use of a kernel path
  // is translated, so this is what a microVM's create waits for).
  auto lap = [&](const char* what) {
    const int64_t now = NowMs();
    setup_ms_[what] = now - mark;
    mark = now;
  };
  if (vm) {
    // A microVM: layers are disks of this guest, limits its own cgroup; the node's clock and
    // randomness replace a restored template's.
    WARREN_RETURN_IF_ERROR(VmReseed(h.vm->seed, h.vm->now_ns));
    lap("reseed");
    fds = WARREN_TRY(MountVmLayers(h.vm->layer_serials));
    lap("layers");
    // (In a full OS the limits set here stay; the service's agent opens the group again
    // where systemd mounts the hierarchy.)
    commands_cgroup_ =
        WARREN_TRY(MakeVmCommandsCgroup(kInitCgroupDir, h.vm->memory_bytes, h.vm->pids));
    // Its directory, to freeze it later: the path is gone once we switch root.
    vm_commands_dir_.Reset(open((std::string(kInitCgroupDir) + "/commands").c_str(),
                                O_PATH | O_DIRECTORY | O_CLOEXEC));
    lap("cgroup");
    if (h.vm->net) {
      WARREN_RETURN_IF_ERROR(ConfigureVmNet(*h.vm->net));
      lap("net");
    }
  }
  if (fds.size() != h.layers) return Invalid("layer fd count mismatch", "agent");
  const json env = h.env;
  AddBaseEnv(env);

  // The node attached us to the v1 cgroups after clone; a fresh cgroup namespace now roots
  // /proc/self/cgroup at the sandbox's own cgroups, hiding the host's layout.
  if (!vm && unshare(CLONE_NEWCGROUP) != 0) return ErrnoStatus("unshare cgroup namespace", "agent");

  isolation::RootfsPlan plan;
  plan.layers = std::move(fds);
  plan.disk_bytes = h.disk_bytes;
  plan.trusted_xattrs = vm;
  std::string root;
  // Order matters: the overlay first (everything else mounts inside it), /proc before the
  // pivot (mounting procfs in a user namespace requires a fully visible procfs to exist in
  // the mount namespace, which the old root provides), then the pivot detaches the host.
  const size_t layer_count = plan.layers.size();
  WARREN_RETURN_IF_ERROR(isolation::BuildRootfs(plan, &root));
  const std::vector<size_t> tools(h.tool_layers.begin(), h.tool_layers.end());
  WARREN_RETURN_IF_ERROR(isolation::GuardToolLayers(tools, layer_count, root));
  for (size_t i = 0; i <= layer_count && i <= kMaxKeptLayers; ++i) {
    const std::string dir =
        std::string(isolation::kStagingDir) + (i == 0 ? "" : "/l" + std::to_string(i - 1));
    UniqueFd fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd || dup3(fd.get(), kStagingDirFd + static_cast<int>(i), O_CLOEXEC) < 0)
      return ErrnoStatus("keep", dir);
  }
  lap("rootfs");
  if (vm) {
    // The guest's kernel is the sandbox's own: its /proc and devices hide nothing of the host
    // (and its root could mknod them anyway), so no masks; fewer mounts also make setup
    // faster under TCG, where each first use of a kernel path is translated.
    WARREN_RETURN_IF_ERROR(MountVmProcAndDev(root));
  } else {
    WARREN_RETURN_IF_ERROR(isolation::MountProc(root, isolation::kStagingDir));
    WARREN_RETURN_IF_ERROR(isolation::MountMinimalDev(root, isolation::kStagingDir));
  }
  if (full_os_) {
    // Its init and udev write to /sys.
    const std::string sys = root + "/sys";
    if (mount("sysfs", sys.c_str(), "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
      return ErrnoStatus("mount sysfs", sys);
  } else {
    WARREN_RETURN_IF_ERROR(isolation::MountSys(root, sysfs.get(), isolation::kStagingDir));
  }
  lap("proc_dev_sys");
  WARREN_RETURN_IF_ERROR(vm ? SwitchRootInto(root) : isolation::PivotInto(root));
  lap("pivot");
  // An image without systemd (busybox, a slim Debian) still runs as a whole VM, with us as
  // its init as in a microVM: switching backend stays one parameter.
  if (full_os_ && !ImageBootsSystemd()) full_os_ = false;
  const std::string& hostname = h.hostname;
  if (sethostname(hostname.data(), hostname.size()) != 0)
    return ErrnoStatus("sethostname", hostname);
  // In a namespace the node made, lo is up already and we could not touch it (the node's
  // user namespace owns it, not ours).
  if (h.loopback) WARREN_RETURN_IF_ERROR(isolation::BringUpLoopback());
  // Files the node wants in place before any command runs (an egress sandbox's resolver
  // and proxy configuration), written after the pivot so every path, symlinks included,
  // resolves inside the sandbox. A file standing there is replaced (a symlink is not
  // followed); a missing directory means the image has no use for the file.
  for (const SetupFile& f : h.files) {
    const std::string& path = f.path;
    const std::string& data = f.data;
    unlink(path.c_str());
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, f.mode));
    if (!fd) continue;
    if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
      return ErrnoStatus("write", path);
  }
  nofile_ = h.nofile;
  if (full_os_) {
    // The rest is the service's (SetupService), after the image's init has started it. A
    // full OS is not sealed like a container: its root may use setuid programs, ptrace and
    // mount, as on any machine; the VM is the boundary.
    lap("files");
    json doc = {{"env", env},
                {"hostname", hostname},
                {"nofile", nofile_},
                {"memory_bytes", h.vm->memory_bytes},
                {"pids", h.vm->pids},
                {"setup_ms", setup_ms_},
                {"handover_ms", NowMs()}};
    return InstallVmAgentService(doc.dump());
  }
  ReadOomScoreAdj();
  // Every command's stdin unless it has one: opened once, not once per command.
  null_fd_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));

  // From here on the sandbox is sealed, in this order:
  // - the bounding set narrowed to what commands keep, here once rather than in each
  //   command's child (30 system calls per command); the agent keeps its own capabilities,
  //   which the bounding set does not limit. Not in a runner: its dispatcher keeps them all.
  if (!h.privileged_channel) {
    WARREN_RETURN_IF_ERROR(isolation::NarrowBoundingSet(/*chroot=*/!microvm_));
    bounding_narrowed_ = true;
  }
  // - non-dumpable: without CAP_SYS_PTRACE (commands lose it) nothing can ptrace us, open
  //   /proc/1/mem or pidfd_getfd our control socket;
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoStatus("set non-dumpable", "agent");
  // - no_new_privs: no setuid binary or file capability gives anything back; Landlock and
  //   seccomp need it;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoStatus("no_new_privs", "agent");
  // - one Landlock domain for the whole sandbox, the agent included, so signals and abstract
  //   sockets work between commands but never cross the sandbox's boundary;
  if (h.landlock) landlock_abi_ = WARREN_TRY(isolation::ApplyLandlock(/*required=*/false));
  // - seccomp last: it denies the mount calls used above.
  if (!msg.payload.empty()) WARREN_RETURN_IF_ERROR(isolation::InstallSeccompFilter(msg.payload));
  lap("rest");
  return Status::Ok();
}

void Agent::Watch(int fd, uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(epoll_.get(), add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, add ? &ev : nullptr);
}

void Agent::Rearm(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

void Agent::StartExec(Message& m) {
  const json& h = m.header;
  std::string id = h.value("id", "");
  auto fail = [&](const std::string& why) {
    Reply({{"t", "exec_failed"}, {"id", id}, {"error", why}});
  };
  if (id.empty() || execs_.count(id)) return fail("bad or duplicate exec id");
  auto e = std::make_unique<Exec>();
  e->id = id;
  e->max_output = h.value("max_output", uint64_t{1} << 20);
  e->channel = h.value("channel", false);
  if (e->channel) e->max_output = ~uint64_t{0};
  int64_t timeout_ms = h.value("timeout_ms", int64_t{0});
  if (timeout_ms > 0) e->deadline_ms = NowMs() + timeout_ms;

  ChildSpec cs;
  const json argv = h.value("argv", json::array());
  for (const auto& a : argv)
    if (a.is_string()) cs.argv.push_back(a.get<std::string>());
  if (cs.argv.empty()) return fail("empty argv");
  cs.env = base_env_;
  const json env = h.value("env", json::object());
  for (auto& [k, v] : env.items()) {
    if (!v.is_string()) continue;
    std::string kv = k + "=" + v.get<std::string>();
    bool replaced = false;
    for (auto& old : cs.env)
      if (old.compare(0, k.size() + 1, k + "=") == 0) old = kv, replaced = true;
    if (!replaced) cs.env.push_back(kv);
  }
  if (auto d = h.find("env_defaults"); d != h.end() && d->is_object()) {
    for (auto& [k, v] : d->items()) {
      if (!v.is_string()) continue;
      bool set = false;
      for (auto& old : cs.env) set = set || old.compare(0, k.size() + 1, k + "=") == 0;
      if (!set) cs.env.push_back(k + "=" + v.get<std::string>());
    }
  }
  cs.cwd = h.value("cwd", "/");
  cs.nofile = nofile_;
  cs.agent_oom_score_adj = oom_score_adj_;
  cs.cgroup_procs_fd = commands_cgroup_.get();
  cs.keep_caps = e->channel || whole_machine_;
  cs.keep_chroot = !microvm_;
  cs.bounding_narrowed = bounding_narrowed_;
  cs.null_fd = null_fd_.get();

  // The command's end of its stdio, closed here once it is spawned.
  UniqueFd child_in, child_out, child_err_stream;
  if (auto tty = h.find("tty"); tty != h.end() && tty->is_object()) {
    auto pty = OpenPty(tty->value("rows", uint16_t{24}), tty->value("cols", uint16_t{80}));
    if (!pty.ok()) return fail(pty.status().ToString());
    e->tty = cs.tty = true;
    cs.stdin_fd = cs.stdout_fd = cs.stderr_fd = pty->slave.get();
    child_out = std::move(pty->slave);
    e->in.Reset(fcntl(pty->master.get(), F_DUPFD_CLOEXEC, 0));
    if (!e->in) return fail(ErrText("dup", "pty", errno));
    e->out = std::move(pty->master);
  } else {
    int po[2], pe[2], pi[2] = {-1, -1};
    if (pipe2(po, O_CLOEXEC)) return fail(ErrText("pipe2", id, errno));
    e->out.Reset(po[0]), child_out.Reset(po[1]);
    if (pipe2(pe, O_CLOEXEC)) return fail(ErrText("pipe2", id, errno));
    e->err.Reset(pe[0]), child_err_stream.Reset(pe[1]);
    if (h.value("stdin", false)) {
      if (pipe2(pi, O_CLOEXEC)) return fail(ErrText("pipe2", id, errno));
      child_in.Reset(pi[0]), e->in.Reset(pi[1]);
    }
    cs.stdout_fd = po[1];
    cs.stderr_fd = pe[1];
    cs.stdin_fd = pi[0];
  }
  const Spawned child = SpawnChild(cs);
  child_in.Reset();
  child_out.Reset();
  child_err_stream.Reset();
  if (child.pid < 0) return fail(ErrText("fork", cs.argv[0], child.error));
  const pid_t pid = child.pid;
  e->pid = pid;
  // A failed chdir is a bad request; a failed exec is reported like a shell does (127 not
  // found, 126 not executable).
  if (child.failed_stage) {
    if (std::string_view(child.failed_stage) == "chdir") {
      waitpid(pid, nullptr, 0);
      return fail(ErrText("chdir", cs.cwd, child.error));
    }
    std::string msg = "warren: " + ErrText(child.failed_stage, cs.argv[0], child.error) + "\n";
    SendOutput(*e, 1, msg);
  }
  for (int which : {0, 1}) {
    const int fd = which == 0 ? e->out.get() : e->err.get();
    if (fd < 0) continue;  // a terminal has one output
    fcntl(fd, F_SETFL, O_NONBLOCK);
    fd_owner_[fd] = {id, which};
    if (connected_) Watch(fd, EPOLLIN, true);
  }
  if (e->in) {
    fcntl(e->in.get(), F_SETFL, O_NONBLOCK);
    e->pending_stdin = std::move(m.payload);
    e->stdin_eof = !h.value("stdin_more", false);
    fd_owner_[e->in.get()] = {id, 2};
    Watch(e->in.get(), EPOLLOUT, true);
    e->stdin_armed = true;
  }
  execs_[id] = std::move(e);
}

void Agent::WriteStdin(Exec& e) {
  while (e.in && !e.pending_stdin.empty()) {
    ssize_t n = write(e.in.get(), e.pending_stdin.data(), e.pending_stdin.size());
    if (n < 0) {
      if (errno == EAGAIN) return;
      e.pending_stdin.clear();  // EPIPE: the command does not read its stdin
      e.stdin_eof = true;
      break;
    }
    e.pending_stdin.erase(0, static_cast<size_t>(n));
  }
  if (e.in && e.pending_stdin.empty() && e.stdin_eof) {
    fd_owner_.erase(e.in.get());
    Watch(e.in.get(), 0, false);
    e.in.Reset();
  } else if (e.in && e.pending_stdin.empty() && e.stdin_armed) {
    Rearm(e.in.get(), 0);
    e.stdin_armed = false;
  }
}

void Agent::HandleStdin(Message& m) {
  auto it = execs_.find(m.header.value("id", ""));
  if (it == execs_.end() || !it->second->in) return;
  Exec& e = *it->second;
  e.pending_stdin += m.payload;
  if (m.header.value("eof", false)) e.stdin_eof = true;
  WriteStdin(e);
  if (e.in && !e.pending_stdin.empty() && !e.stdin_armed) {
    Rearm(e.in.get(), EPOLLOUT);
    e.stdin_armed = true;
  }
}

// input {id: op, exec, eof} + bytes -> ok {id} | err {id, code, error}: a client's input for a
// command started with an open stdin or a terminal, acknowledged so that the client learns
// when the command does not read it (and its bytes are not buffered without bound).
void Agent::HandleInput(Message& m) {
  const std::string op = m.header.value("id", ""), exec_id = m.header.value("exec", "");
  auto refuse = [&](Code code, int err, const std::string& why) {
    ReplyError(op, Status(code, "write input", exec_id, why, err));
  };
  auto it = execs_.find(exec_id);
  if (it == execs_.end() || it->second->exited)
    return refuse(Code::kConflict, ESRCH, "the command has ended");
  Exec& e = *it->second;
  if (!e.in) return refuse(Code::kConflict, EPIPE, "the command's stdin is closed");
  const bool eof = m.header.value("eof", false);
  if (e.pending_stdin.size() + m.payload.size() > kMaxPendingInput)
    return refuse(Code::kQuota, EAGAIN,
                  "the command is not reading its input (" +
                      std::to_string(e.pending_stdin.size()) + " bytes wait)");
  e.pending_stdin += m.payload;
  // A terminal ends input with its end-of-file character, as a person types it: closing the
  // master would hang up the whole session.
  if (eof && e.tty) e.pending_stdin += '\x04';
  if (eof && !e.tty) e.stdin_eof = true;
  WriteStdin(e);
  if (e.in && !e.pending_stdin.empty() && !e.stdin_armed) {
    Rearm(e.in.get(), EPOLLOUT);
    e.stdin_armed = true;
  }
  Reply({{"t", "ok"}, {"id", op}});
}

void Agent::HandleResize(Message& m) {
  auto it = execs_.find(m.header.value("id", ""));
  if (it == execs_.end() || !it->second->tty || it->second->exited) return;
  const uint16_t rows = m.header.value("rows", uint16_t{24}),
                 cols = m.header.value("cols", uint16_t{80});
  (void)ResizePty(it->second->out ? it->second->out.get() : it->second->in.get(), rows, cols);
}

ChildSpec Agent::CommandSpec() const {
  ChildSpec cs;
  cs.env = base_env_;
  cs.cwd = "/";
  cs.nofile = nofile_;
  cs.agent_oom_score_adj = oom_score_adj_;
  cs.cgroup_procs_fd = commands_cgroup_.get();
  cs.keep_caps = whole_machine_;
  cs.keep_chroot = !microvm_;
  cs.bounding_narrowed = bounding_narrowed_;
  cs.null_fd = null_fd_.get();
  return cs;
}

// display {id, width, height, device} -> ok | err: starts the screen (once; a second ask is
// ok). device: the machine's display device (backend vm) rather than a virtual one.
void Agent::HandleDisplay(Message& m) {
  const std::string id = m.header.value("id", "");
  const int w = m.header.value("width", 0), h = m.header.value("height", 0);
  if (w < 0 || h < 0 || !DisplaySize::Valid(static_cast<uint64_t>(w), static_cast<uint64_t>(h)))
    return ReplyError(id, Invalid("display size out of range"));
  const bool first = !desktop_.started();
  Status st = desktop_.Start(CommandSpec(), static_cast<uint16_t>(w), static_cast<uint16_t>(h),
                             m.header.value("device", false));
  if (!st.ok()) return ReplyError(id, st);
  if (first) base_env_.push_back("DISPLAY=:0");  // every command finds the screen
  Reply({{"t", "ok"}, {"id", id}});
}

// data {id, last} + bytes, in messages of at most kMaxPayload (one, empty, for no bytes).
void Agent::ReplyData(const std::string& id, const std::string& data) {
  size_t off = 0;
  do {
    const size_t n = std::min(data.size() - off, kMaxPayload);
    const bool last = off + n >= data.size();
    Reply({{"t", "data"}, {"id", id}, {"last", last}}, data.substr(off, n));
    off += n;
  } while (off < data.size());
}

// screen {id} -> data {id, last} + PNG | err
void Agent::HandleScreen(Message& m) {
  const std::string id = m.header.value("id", "");
  auto png = desktop_.ScreenshotPng();
  if (!png.ok()) return ReplyError(id, png.status());
  ReplyData(id, *png);
  malloc_trim(0);  // a screenshot's buffers are not the idle agent's
}

// desktop_input {id, steps} -> ok | err
void Agent::HandleDesktopInput(Message& m) {
  const std::string id = m.header.value("id", "");
  auto steps = ParseInputSteps(m.header.value("steps", json::array()));
  if (!steps.ok()) return ReplyError(id, steps.status());
  Status st = desktop_.Perform(*steps);
  if (!st.ok()) return ReplyError(id, st);
  Reply({{"t", "ok"}, {"id", id}});
}

void Agent::HandleSignal(Message& m) {
  auto it = execs_.find(m.header.value("id", ""));
  int sig = m.header.value("sig", SIGTERM);
  if (it != execs_.end() && !it->second->exited && sig > 0 && sig < NSIG)
    kill(-it->second->pid, sig);
}

void Agent::HandlePut(Message& m) {
  const json& h = m.header;
  std::string id = h.value("id", ""), path = h.value("path", "");
  auto err = [&](const char* op, int e) {
    puts_.erase(id);
    Reply({{"t", "err"}, {"id", id}, {"errno", e}, {"error", ErrText(op, path, e)}});
  };
  if (h.value("first", false)) {
    mode_t mode = h.value("mode", 0644u) & 07777;
    // O_NONBLOCK: opening a FIFO for writing must not wait for a reader (it fails with ENXIO
    // or is refused below); only regular files are written.
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    UniqueFd fd(open(path.c_str(), flags, mode));
    if (!fd && errno == ENOENT) {
      // Missing directories on the way are made (0755), as `mkdir -p` would: a client writes
      // /work/pkg/mod.py without a separate call for /work/pkg. All inside the sandbox.
      for (size_t slash = path.find('/', 1); slash != std::string::npos;
           slash = path.find('/', slash + 1))
        if (mkdir(path.substr(0, slash).c_str(), 0755) != 0 && errno != EEXIST)
          return err("mkdir", errno);
      fd = UniqueFd(open(path.c_str(), flags, mode));
    }
    if (!fd) return err("open", errno);
    struct stat sb;
    if (fstat(fd.get(), &sb) != 0 || !S_ISREG(sb.st_mode)) return err("open", EINVAL);
    if (ftruncate(fd.get(), 0) != 0) return err("truncate", errno);
    fcntl(fd.get(), F_SETFL, 0);
    if (fchmod(fd.get(), mode) != 0) return err("chmod", errno);
    puts_[id] = std::move(fd);
  }
  auto it = puts_.find(id);
  if (it == puts_.end()) return;  // an earlier chunk failed and was reported
  size_t off = 0;
  while (off < m.payload.size()) {
    ssize_t n = write(it->second.get(), m.payload.data() + off, m.payload.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return err("write", errno);
    }
    off += static_cast<size_t>(n);
  }
  if (h.value("last", false)) {
    puts_.erase(it);
    Reply({{"t", "ok"}, {"id", id}});
  }
}

void Agent::HandleGet(Message& m) {
  const json& h = m.header;
  std::string id = h.value("id", ""), path = h.value("path", "");
  uint64_t max = h.value("max", uint64_t{64} << 20);
  auto err = [&](const char* op, int e) {
    Reply({{"t", "err"}, {"id", id}, {"errno", e}, {"error", ErrText(op, path, e)}});
  };
  // O_NONBLOCK: a FIFO must not block us; only regular files are served.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) return err("open", errno);
  struct stat sb;
  if (fstat(fd.get(), &sb) != 0) return err("stat", errno);
  if (S_ISDIR(sb.st_mode)) return err("read", EISDIR);
  if (!S_ISREG(sb.st_mode)) return err("read", EINVAL);
  if (static_cast<uint64_t>(sb.st_size) > max) return err("read", EFBIG);
  // Static, like ReadPipe's: not 60 KiB zero-filled (15 pages faulted in) for every file.
  static char buf[kMaxPayload];
  uint64_t total = 0;
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return err("read", errno);
    }
    total += static_cast<uint64_t>(n);
    if (total > max) return err("read", EFBIG);  // the file grew while we read it
    bool last = n == 0;
    Reply({{"t", "data"}, {"id", id}, {"last", last}}, std::string(buf, static_cast<size_t>(n)));
    if (last) return;
  }
}

void Agent::ReadPipe(Exec& e, int which) {
  UniqueFd& fd = which == 0 ? e.out : e.err;
  // Static, not on the stack: a 60 KiB frame is probed page by page (stack clash
  // protection), so every idle agent would keep those pages; here only what read() wrote is.
  static char buf[kMaxPayload];
  for (int round = 0; round < 16 && fd; ++round) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      fd_owner_.erase(fd.get());
      Watch(fd.get(), 0, false);
      fd.Reset();
      MaybeFinish(e);
      return;
    }
    // Output past the cap is read and dropped, so the command never blocks on a full pipe.
    uint64_t room = e.max_output > e.sent[which] ? e.max_output - e.sent[which] : 0;
    size_t keep = static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n)));
    if (keep < static_cast<size_t>(n)) e.truncated[which] = true;
    if (keep > 0) SendOutput(e, which, std::string(buf, keep));
    if (!connected_) return;
  }
}

void Agent::SendOutput(Exec& e, int which, std::string data) {
  constexpr size_t kRing = 256 * 1024;  // more than a unix socket's send buffer holds
  e.sent[which] += data.size();
  if (!e.channel) {
    e.ring[which] += data;
    if (e.ring[which].size() > kRing) e.ring[which].erase(0, e.ring[which].size() - kRing);
  }
  Reply({{"t", "out"}, {"id", e.id}, {"s", which == 0 ? "stdout" : "stderr"}}, std::move(data));
}

void Agent::Disconnect() {
  if (!connected_) return;
  if (!listen_) _exit(0);
  connected_ = false;
  Watch(kControlFd, 0, false);
  close(kControlFd);
  puts_.clear();  // unfinished uploads die with the connection that carried them
  for (auto& [fd, owner] : fd_owner_) Watch(fd, 0, false);
  Watch(listen_.get(), EPOLLIN, true);
}

void Agent::Reconnect() {
  int fd = accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  if (fd != kControlFd) {
    dup2(fd, kControlFd);  // keeps O_CLOEXEC off the copy: fine, commands close_range anyway
    close(fd);
  }
  fcntl(kControlFd, F_SETFD, FD_CLOEXEC);
  connected_ = true;
  Watch(listen_.get(), 0, false);
  Watch(kControlFd, EPOLLIN, true);
  // Nothing is sent until the node says what it already has (HandleResume).
}

// resume {execs: {ID: [stdout bytes, stderr bytes] the node holds}} -> resumed {execs: [...]}
// then every byte after those offsets still in the ring is sent again, and the pipes are
// read from again.
void Agent::HandleResume(Message& m) {
  const json have = m.header.value("execs", json::object());
  json known = json::array();
  for (auto& [id, e] : execs_) {
    known.push_back({{"id", id}, {"sent", {e->sent[0], e->sent[1]}}, {"exited", e->exited}});
  }
  for (auto& f : finished_)
    if (have.contains(f.exec->id))
      known.push_back(
          {{"id", f.exec->id}, {"sent", {f.exec->sent[0], f.exec->sent[1]}}, {"exited", true}});
  Reply({{"t", "resumed"}, {"execs", known}});
  auto resend = [&](const std::string& id, Exec* e) {
    for (int i = 0; i < 2; ++i) {
      uint64_t from = 0;
      if (have.contains(id) && have[id].is_array() && have[id].size() == 2 &&
          have[id][i].is_number_unsigned())
        from = have[id][i].get<uint64_t>();
      uint64_t ring_start = e->sent[i] - e->ring[i].size();
      if (from < ring_start) {
        e->truncated[i] = true;  // older than what we kept: lost with the old node
        from = ring_start;
      }
      if (from >= e->sent[i]) continue;
      std::string rest = e->ring[i].substr(static_cast<size_t>(from - ring_start));
      for (size_t off = 0; off < rest.size(); off += kMaxPayload)
        Reply({{"t", "out"}, {"id", id}, {"s", i == 0 ? "stdout" : "stderr"}},
              rest.substr(off, kMaxPayload));
    }
  };
  for (auto& [id, e] : execs_)
    if (have.contains(id)) resend(id, e.get());
  // Execs the node still thinks are running but that ended while it was away.
  for (auto& f : finished_) {
    if (!have.contains(f.exec->id)) continue;
    resend(f.exec->id, f.exec.get());
    Reply(f.exit);
  }
  for (auto& [fd, owner] : fd_owner_) {
    uint32_t ev = EPOLLIN;
    if (owner.second == 2) {
      auto it = execs_.find(owner.first);
      ev = it != execs_.end() && it->second->stdin_armed ? static_cast<uint32_t>(EPOLLOUT) : 0u;
    }
    Watch(fd, ev, true);
  }
  std::vector<Exec*> exited;
  for (auto& [id, e] : execs_)
    if (e->exited) exited.push_back(e.get());
  for (Exec* e : exited) MaybeFinish(*e);
}

void Agent::MaybeFinish(Exec& e) {
  if (!e.exited || !connected_) return;
  bool pipes_open = e.out || e.err;
  if (pipes_open && NowMs() - e.exited_at_ms < kExitGraceMs) return;
  for (UniqueFd* fd : {&e.out, &e.err, &e.in}) {
    if (*fd) {
      fd_owner_.erase(fd->get());
      Watch(fd->get(), 0, false);
      fd->Reset();
    }
  }
  json r = {{"t", "exit"},
            {"id", e.id},
            {"timed_out", e.timed_out},
            {"stdout_truncated", e.truncated[0]},
            {"stderr_truncated", e.truncated[1]},
            {"signal", nullptr}};
  if (e.timed_out) {
    r["exit_code"] = 124;
    r["signal"] = "KILL";
  } else if (WIFSIGNALED(e.status)) {
    r["exit_code"] = 128 + WTERMSIG(e.status);
    const char* name = sigabbrev_np(WTERMSIG(e.status));
    r["signal"] = name ? name : std::to_string(WTERMSIG(e.status));
  } else {
    r["exit_code"] = WEXITSTATUS(e.status);
  }
  std::string id = e.id;
  Reply(r);
  auto it = execs_.find(id);
  constexpr size_t kKeepFinished = 16, kKeepTail = 64 * 1024;
  for (auto& ring : it->second->ring)
    if (ring.size() > kKeepTail) ring.erase(0, ring.size() - kKeepTail);
  finished_.push_back({std::move(it->second), std::move(r)});
  if (finished_.size() > kKeepFinished) finished_.pop_front();
  execs_.erase(it);
}

void Agent::ReapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (auto& [id, e] : execs_) {
      if (e->pid == pid && !e->exited) {
        // Drain what is already in the pipes before deciding (not yet marked exited, so
        // an EOF here cannot finish and free the exec under us). Disconnected, the output
        // stays in the pipes until a node is back.
        if (connected_ && e->out) ReadPipe(*e, 0);
        if (connected_ && e->err) ReadPipe(*e, 1);
        e->exited = true;
        e->status = status;
        e->exited_at_ms = NowMs();
        MaybeFinish(*e);
        break;
      }
    }
    desktop_.Reaped(pid, status);
  }
}

void Agent::CheckTimers() {
  int64_t now = NowMs();
  std::vector<Exec*> due;
  for (auto& [id, e] : execs_) {
    if (!e->exited && e->deadline_ms && now >= e->deadline_ms && !e->timed_out) {
      e->timed_out = true;
      kill(-e->pid, SIGKILL);
      kill(e->pid, SIGKILL);
    }
    if (e->exited) due.push_back(e.get());
  }
  for (Exec* e : due) MaybeFinish(*e);
}

void Agent::HandleMessage(Message& m) {
  std::string t = m.header.value("t", "");
  if (t == "exec")
    StartExec(m);
  else if (t == "stdin")
    HandleStdin(m);
  else if (t == "input")
    HandleInput(m);
  else if (t == "resize")
    HandleResize(m);
  else if (t == "display")
    HandleDisplay(m);
  else if (t == "screen")
    HandleScreen(m);
  else if (t == "desktop_input")
    HandleDesktopInput(m);
  else if (t == "signal")
    HandleSignal(m);
  else if (t == "put")
    HandlePut(m);
  else if (t == "get")
    HandleGet(m);
  else if (t == "ping")
    Reply({{"t", "pong"}, {"id", m.header.value("id", "")}});
  else if (t == "resume")
    HandleResume(m);
  else if (t == "assign")
    HandleAssign(m);
  else if (t == "vm_refresh")
    HandleVmRefresh(m);
  else if (t == "clock")
    HandleClock(m);
  else if (t == "fs_policy")
    HandleFsPolicy(m);
  else if (t == "fs_changes")
    HandleFsChanges(m);
  else if (t == "fs_snapshot")
    HandleFsSnapshot(m);
}

void Agent::ReplyError(const std::string& id, const Status& st) {
  Reply({{"t", "err"},
         {"id", id},
         {"errno", st.err()},
         {"code", CodeName(st.code())},
         {"error", st.ToString()}});
}

namespace {

// The commands' cgroup of a microVM (vm_init.cc, at `dir`) frozen or thawed; the agent is not
// in it.
Status FreezeVmCommands(int dir, bool frozen) {
  {
    UniqueFd f(openat(dir, "cgroup.freeze", O_WRONLY | O_CLOEXEC));
    if (!f || write(f.get(), frozen ? "1" : "0", 1) != 1) return ErrnoStatus("freeze", "commands");
  }
  for (int i = 0; frozen && i < 1000; ++i) {
    char buf[256] = {};
    UniqueFd f(openat(dir, "cgroup.events", O_RDONLY | O_CLOEXEC));
    if (!f) return ErrnoStatus("open", "commands/cgroup.events");
    if (read(f.get(), buf, sizeof buf - 1) > 0 && strstr(buf, "frozen 1")) return Status::Ok();
    usleep(1000);
  }
  if (!frozen) return Status::Ok();
  if (UniqueFd f(openat(dir, "cgroup.freeze", O_WRONLY | O_CLOEXEC)); f)
    (void)!write(f.get(), "0", 1);
  return Status(Code::kUnavailable, "freeze", "commands", "they did not stop in 1 s");
}

}  // namespace

void Agent::HandleFsPolicy(const Message& m) {
  const std::string id = m.header.value("id", "");
  if (!microvm_)
    return ReplyError(
        id, Status(Code::kUnavailable, "set filesystem policy", "sandbox",
                   "not in this backend (root keeps every capability in a whole machine)"));
  auto policy = FsPolicyFromFields(m.header);
  if (!policy.ok()) return ReplyError(id, policy.status());
  UniqueFd upper(openat(kStagingDirFd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper) return ReplyError(id, ErrnoStatus("open", "upper layer"));
  if (Status st = FreezeVmCommands(vm_commands_dir_.get(), true); !st.ok())
    return ReplyError(id, st);
  isolation::FsApplySteps steps;
  steps.check = isolation::CheckFsPolicy;
  steps.prepare = isolation::PrepareFsPolicy;
  steps.sever = [](const std::vector<std::string>& paths) -> Status {
    for (const auto& p : paths) WARREN_RETURN_IF_ERROR(isolation::SeverFile(p));
    return Status::Ok();
  };
  auto stats = isolation::ApplyFsPolicyToUpper(upper.get(), *policy, steps);
  Status thaw = FreezeVmCommands(vm_commands_dir_.get(), false);
  if (!stats.ok()) return ReplyError(id, stats.status());
  if (!thaw.ok()) return ReplyError(id, thaw);
  Reply({{"t", "ok"},
         {"id", id},
         {"flags_changed", stats->flags_changed},
         {"severed", stats->severed}});
}

void Agent::HandleFsChanges(const Message& m) {
  const std::string id = m.header.value("id", "");
  // A container's report is read by the node (runtime/container/fs_guard.h); a whole
  // machine's root may remount anything.
  if (!microvm_)
    return ReplyError(id, Status(Code::kUnavailable, "read changes", "sandbox",
                                 "not read by this agent in this backend"));
  const std::string under = m.header.value("under", "/");
  const size_t limit = m.header.value("limit", size_t{10000});
  UniqueFd upper(openat(kStagingDirFd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper) return ReplyError(id, ErrnoStatus("open", "upper layer"));
  UniqueFd shm(openat(kStagingDirFd, "shm", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  std::vector<UniqueFd> layers;
  std::vector<int> fds;
  for (int i = 0; i < kMaxKeptLayers; ++i) {
    UniqueFd l(openat(kFirstLayerFd + i, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!l) break;
    fds.push_back(l.get());
    layers.push_back(std::move(l));
  }
  // Frozen while it is read: nothing can be renamed or swapped under the walk.
  if (Status st = FreezeVmCommands(vm_commands_dir_.get(), true); !st.ok())
    return ReplyError(id, st);
  auto report = isolation::ReadChanges(upper.get(), shm.get(), fds, under, limit);
  (void)FreezeVmCommands(vm_commands_dir_.get(), false);
  if (!report.ok()) return ReplyError(id, report.status());
  ReplyData(id, EncodeChangeReport(*report));
}

// fs_snapshot {id} -> data {id, last} + a pax tar of the writable layer, as it is read | err.
// A microVM's upper lives in the guest: the node flattens it with the workspace layer it
// holds itself (node/snapshot_builder.h). The commands are frozen for the whole read, and the
// agent answers nothing else meanwhile (one loop), which is the point: one moment's tree.
void Agent::HandleFsSnapshot(const Message& m) {
  const std::string id = m.header.value("id", "");
  if (!microvm_)
    return ReplyError(id, Status(Code::kUnavailable, "snapshot", "sandbox",
                                 "not read by this agent in this backend"));
  UniqueFd upper(openat(kStagingDirFd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper) return ReplyError(id, ErrnoStatus("open", "upper layer"));
  if (Status st = FreezeVmCommands(vm_commands_dir_.get(), true); !st.ok())
    return ReplyError(id, st);
  std::string piece;
  auto sink = [&](std::string_view bytes) -> Status {
    while (!bytes.empty()) {
      const size_t n = std::min(bytes.size(), kMaxPayload - piece.size());
      piece.append(bytes.substr(0, n));
      bytes.remove_prefix(n);
      if (piece.size() == kMaxPayload) {
        Reply({{"t", "data"}, {"id", id}, {"last", false}}, piece);
        piece.clear();
      }
    }
    return Status::Ok();
  };
  TarStreamStats stats;
  Status st = WriteTarStream(upper.get(), sink, &stats);
  Status thaw = FreezeVmCommands(vm_commands_dir_.get(), false);
  if (!st.ok()) return ReplyError(id, st);
  if (!thaw.ok()) return ReplyError(id, thaw);
  Reply({{"t", "data"}, {"id", id}, {"last", true}}, piece);
}

// A sandbox made ahead of demand (node/warm_pool.h) is handed to a create: it takes that
// create's hostname, base environment and commands' open-file limit. Nothing has run in it.
void Agent::HandleAssign(const Message& m) {
  auto parsed = ParseAssign(m.header);
  if (!parsed.ok()) {
    Reply({{"t", "err"}, {"errno", EINVAL}, {"error", parsed.status().ToString()}});
    return;
  }
  const AssignMessage& h = *parsed;
  if (sethostname(h.hostname.data(), h.hostname.size()) != 0) {
    const int e = errno;
    Reply({{"t", "err"}, {"errno", e}, {"error", ErrText("sethostname", h.hostname, e)}});
    return;
  }
  base_env_.clear();
  AddBaseEnv(json(h.env));
  nofile_ = h.nofile;
  Reply({{"t", "assigned"}});
}

// A microVM forked with its memory (agent/setup_messages.h): this guest was its parent a
// moment ago. It takes the child's randomness, clock, hostname, environment and address
// before the node lets anything else through (`resume` comes after `refreshed`).
void Agent::HandleVmRefresh(const Message& m) {
  auto parsed = ParseVmRefresh(m.header);
  if (!parsed.ok()) return ReplyError("", parsed.status());
  if (!microvm_)
    return ReplyError("", Status(Code::kUnavailable, "refresh", "agent", "not a microVM's agent"));
  const VmRefreshMessage& h = *parsed;
  Status st = VmReseed(h.seed, h.now_ns);
  if (st.ok() && sethostname(h.hostname.data(), h.hostname.size()) != 0)
    st = ErrnoStatus("sethostname", h.hostname);
  if (st.ok() && h.net) st = ConfigureVmNet(*h.net);
  if (!st.ok()) return ReplyError("", st);
  base_env_.clear();
  AddBaseEnv(json(h.env));
  Reply({{"t", "refreshed"}});
}

// clock {now_ns}: a microVM's guest stood still while its QEMU was stopped (a fork's capture);
// its realtime clock takes the node's. No answer (best effort: a guest a moment late is not
// an error anyone could act on).
void Agent::HandleClock(const Message& m) {
  if (!microvm_ || !m.header.contains("now_ns") || !m.header["now_ns"].is_number_integer()) return;
  (void)VmReseed("", m.header["now_ns"].get<int64_t>());
}

int Agent::Serve() {
  epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  sigfd_.Reset(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  Watch(kControlFd, EPOLLIN, true);
  Watch(sigfd_.get(), EPOLLIN, true);
  epoll_event evs[64];
  for (;;) {
    int64_t next = INT64_MAX;
    for (auto& [id, e] : execs_) {
      if (e->exited && !connected_) continue;  // finished when a node is back: no timer
      int64_t due = e->exited ? e->exited_at_ms + kExitGraceMs : e->deadline_ms;
      if (due) next = std::min(next, due);
    }
    int timeout =
        next == INT64_MAX ? -1 : static_cast<int>(std::max<int64_t>(0, next - NowMs() + 1));
    int n = epoll_wait(epoll_.get(), evs, 64, timeout);
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (listen_ && fd == listen_.get()) {
        Reconnect();
      } else if (fd == kControlFd) {
        if (!connected_) continue;
        auto m = Recv(kControlFd);
        // The node closed the socket: it is deleting the sandbox (and will kill us) or it
        // died; either way wait for a new node, if there is a way back.
        if (!m.ok()) {
          Disconnect();
          continue;
        }
        HandleMessage(*m);
      } else if (fd == sigfd_.get()) {
        signalfd_siginfo si;
        while (read(sigfd_.get(), &si, sizeof si) > 0) {
        }
        ReapChildren();
      } else {
        auto it = fd_owner_.find(fd);
        if (it == fd_owner_.end() || !connected_) continue;
        auto ex = execs_.find(it->second.first);
        if (ex == execs_.end()) continue;
        if (it->second.second == 2)
          WriteStdin(*ex->second);
        else
          ReadPipe(*ex->second, it->second.second);
      }
    }
    CheckTimers();
  }
}

}  // namespace

int RunVm() {
  UniqueFd listener;
  pid_t relay = 0;
  Status st = VmInit(&listener, &relay);
  if (!st.ok()) {
    fprintf(stderr, "warren-agent: %s\n", st.ToString().c_str());
    return 1;
  }
  return Run(std::move(listener), relay);
}

Status Agent::SetupService(const json& h) {
  AddBaseEnv(h.value("env", json::object()));
  nofile_ = h.value("nofile", uint64_t{4096});
  setup_ms_ = h.value("setup_ms", json::object());
  whole_machine_ = true;
  // From PID 1's exec of the image's init to this service running (one guest clock).
  setup_ms_["init"] = NowMs() - h.value("handover_ms", int64_t{0});
  commands_cgroup_ = WARREN_TRY(MakeVmCommandsCgroup(
      kSystemCgroupDir, h.value("memory_bytes", uint64_t{0}), h.value("pids", uint64_t{0})));
  // Set again: the image's init may have set its own from /etc/hostname.
  const std::string hostname = h.value("hostname", "sandbox");
  if (sethostname(hostname.data(), hostname.size()) != 0)
    return ErrnoStatus("sethostname", hostname);
  ReadOomScoreAdj();
  return Status::Ok();
}

int RunVmService(const char* setup_path) {
  signal(SIGPIPE, SIG_IGN);
  std::ifstream f(setup_path);
  json doc = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    fprintf(stderr, "warren-agent: unreadable setup %s\n", setup_path);
    return 1;
  }
  UniqueFd listener;
  Status st = OpenVmAgentChannel(kServiceAgentSocket, &listener);
  if (!st.ok()) {
    fprintf(stderr, "warren-agent: %s\n", st.ToString().c_str());
    return 1;
  }
  Agent agent;
  agent.SetListener(std::move(listener));
  st = agent.SetupService(doc);
  if (!st.ok()) {
    (void)Send(kControlFd, Message{{{"t", "setup_failed"}, {"error", st.ToString()}}, ""});
    return 1;
  }
  ReadyMessage ready{agent.setup_ms_.get<std::map<std::string, int64_t>>(), 0, "systemd"};
  if (!Send(kControlFd, Message{ToJson(ready), ""}).ok()) return 1;
  return agent.Serve();
}

int Run(UniqueFd listener, pid_t relay_pid) {
  close(kSelfExeFd);
  signal(SIGPIPE, SIG_IGN);
  Agent agent;
  agent.SetListener(std::move(listener));
  Status st = agent.Setup();
  if (!st.ok()) {
    (void)Send(kControlFd, Message{{{"t", "setup_failed"}, {"error", st.ToString()}}, ""});
    return 1;
  }
  if (agent.full_os_) {
    ExecVmSystemInit(relay_pid);
    return 1;  // PID 1 exits: the guest panics and QEMU ends, which the node reports
  }
  // Setup's buffers (the setup message, its seccomp program, the layer list) are free now
  // but stay resident in the heap: give their pages back. An idle agent is what thousands of
  // sandboxes cost.
  malloc_trim(0);
  LearnSignalDispositions();
  ReadyMessage ready{agent.setup_ms_.get<std::map<std::string, int64_t>>(), agent.landlock_abi_,
                     getpid() == 1 ? "warren-agent" : ""};
  if (!Send(kControlFd, Message{ToJson(ready), ""}).ok()) return 1;
  return agent.Serve();
}

}  // namespace warren::agent
