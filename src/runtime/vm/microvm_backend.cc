#include "runtime/vm/microvm_backend.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <thread>

#include "agent/frame_relay.h"
#include "agent/protocol.h"
#include "agent/setup_messages.h"
#include "agent/vm_init.h"
#include "base/cleanup.h"
#include "base/sha256.h"
#include "base/subprocess.h"
#include "isolation/cgroup.h"
#include "runtime/setup_message.h"
#include "runtime/vm/microvm_boot.h"
#include "runtime/vm/qemu_process.h"
#include "runtime/vm/qmp_client.h"
#include "runtime/vm/qmp_screen.h"
#include "sys/unix_socket.h"

namespace warren::runtime::vm {
namespace {

using nlohmann::json;

// The host's TSC rate: a TCG guest calibrating its own clock hangs now and then without it.
uint64_t HostTscKhz() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("cpu MHz", 0) == 0)
      return static_cast<uint64_t>(std::stod(line.substr(line.find(':') + 1)) * 1000);
  return 0;
}

std::string FileKey(const std::string& path) {
  struct stat sb;
  if (stat(path.c_str(), &sb) != 0) return "missing";
  return std::to_string(sb.st_size) + "-" + std::to_string(sb.st_mtim.tv_sec);
}

// Cache files are held open by the daemon using them and opened per VM through that fd
// (/proc/self/fd/N gives a new open file description, offset 0): another daemon sharing the
// cache may prune a file this one still uses (PruneCache) without breaking it.
Result<UniqueFd> Hold(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  return fd;
}

// Marks a cache file used now (pruning goes by modification time).
void Touch(const std::string& path) { utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

// Removes what the cache holds that no daemon has used for a day: guest images of other
// kernels or agent builds, templates of sizes no longer asked for, leftovers of interrupted
// saves. `keep` are this daemon's own files (used now whatever their age).
void PruneCache(const std::string& cache_dir, const std::vector<std::string>& keep) {
  constexpr time_t kUnusedFor = 24 * 3600;
  const time_t now = time(nullptr);
  for (const std::string& dir : {cache_dir, cache_dir + "/templates"}) {
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      const std::string path = dir + "/" + e->d_name;
      struct stat sb;
      if (e->d_name[0] == '.' || lstat(path.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
      if (std::find(keep.begin(), keep.end(), path) != keep.end() || now - sb.st_mtime < kUnusedFor)
        continue;
      if (unlink(path.c_str()) == 0) spdlog::info("microvm: pruned {} (unused for a day)", path);
    }
    closedir(d);
  }
}

// An empty EROFS image (mkfs.erofs of an empty directory) at the start of a sparse 64 GiB
// file, made under a temporary name and renamed (daemons may share the cache).
Status MakePlaceholder(const std::string& path) {
  char dir[] = "/tmp/warren-placeholder-XXXXXX";
  if (!mkdtemp(dir)) return ErrnoStatus("mkdtemp", dir);
  Cleanup rm_dir([&] { rmdir(dir); });
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  Cleanup rm_tmp([&] { unlink(tmp.c_str()); });
  auto r = RunProgram({"mkfs.erofs", "--quiet", tmp, dir});
  if (!r.ok()) return r.status().Context("make the placeholder disk (is erofs-utils installed?)");
  if (r->exit_code != 0) return Internal("mkfs.erofs", tmp, "failed: " + r->output);
  if (truncate(tmp.c_str(), off_t{64} << 30) != 0) return ErrnoStatus("truncate", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename", path);
  rm_tmp.Cancel();
  return Status::Ok();
}

}  // namespace

struct MicrovmBackend::Template {
  std::mutex mu;           // held while the template is being made or loaded
  std::string state_path;  // device state (QEMU migration stream without RAM)
  std::string ram_path;    // guest RAM image, sparse, to load `ram` from after a restart
  UniqueFd ram;            // guest RAM: a sealed memfd every restored VM maps privately
  UniqueFd state;          // the state file, held (see Hold)
  bool ready = false;
  Status error;
  int64_t failed_at_ms = 0;
  uint64_t ram_mib = 0;
  int vcpus = 1;
  // The warm pool (guarded by the backend's mu_).
  std::deque<std::unique_ptr<MicrovmBoot>> warm;
  bool wanted = false;  // a sandbox of this size was made: keep a pool
  int warm_making = 0;
  int warm_failures = 0;  // in a row; the pool rests after a few
  int64_t warm_failed_at_ms = 0;
  int64_t last_wanted_ms = 0;
};

MicrovmBackend::~MicrovmBackend() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  fill_cv_.notify_all();
  if (filler_.joinable()) filler_.join();
}

int MicrovmBackend::GuestVcpus(double cpus) {
  return std::clamp(static_cast<int>(std::ceil(cpus > 0 ? cpus : 1)), 1, 16);
}

MicrovmBackend::LaunchSpec MicrovmBackend::PlaceholderLaunch(const std::string& name,
                                                             uint64_t ram_mib, int vcpus, Mode mode,
                                                             int placeholder) {
  LaunchSpec ls;
  ls.name = ls.cgroup_name = name;
  ls.ram_mib = ram_mib;
  ls.vcpus = vcpus;
  ls.cpus = vcpus;
  ls.mode = mode;
  ls.layer_fds.assign(kLayerSlots, placeholder);
  return ls;
}

Status MicrovmBackend::OpenLayers(const SandboxConfig& cfg, std::vector<UniqueFd>* owned,
                                  std::vector<int>* fds) {
  for (const auto& l : cfg.layers) {
    UniqueFd f(open(l.blob_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f) return ErrnoStatus("open layer", l.blob_path);
    fds->push_back(f.get());
    owned->push_back(std::move(f));
  }
  return Status::Ok();
}

uint64_t MicrovmBackend::GuestRamMiB(uint64_t memory_bytes) {
  // Kernel, initramfs (agent and modules) and the guest's own page cache need ~130 MiB.
  return std::max<uint64_t>(memory_bytes >> 20, 64) + 192;
}

Result<std::unique_ptr<MicrovmBackend>> MicrovmBackend::Start(const MicrovmOptions& opts,
                                                              isolation::UidAllocator* uids) {
  std::unique_ptr<MicrovmBackend> b(new MicrovmBackend(opts, uids));
  if (access(opts.qemu.c_str(), X_OK) != 0)
    return ErrnoStatus("find QEMU (install qemu-system-x86)", opts.qemu);
  if (mkdir(opts.cache_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", opts.cache_dir);
  b->guest_ = WARREN_TRY(PrepareGuestImage(opts.cache_dir, opts.kernel, opts.agent_path));
  b->accel_ = ChooseAccel(opts.accel == "auto" ? "" : opts.accel);
  b->tsc_khz_ = HostTscKhz();
  b->qemu_version_ = FileKey(opts.qemu);
  // Sparse: the guest sees a large disk in every unused slot, so a layer of any size put
  // behind that slot after a restore is readable up to its end.
  // It starts with an empty EROFS image, which a warm VM mounts to rehearse its setup.
  b->placeholder_ = opts.cache_dir + "/placeholder-erofs.img";
  if (access(b->placeholder_.c_str(), R_OK) != 0)
    WARREN_RETURN_IF_ERROR(MakePlaceholder(b->placeholder_));
  b->placeholder_fd_ = WARREN_TRY(Hold(b->placeholder_));
  b->kernel_fd_ = WARREN_TRY(Hold(b->guest_.kernel_path));
  b->bzimage_fd_ = WARREN_TRY(Hold(b->guest_.bzimage_path));
  b->initrd_fd_ = WARREN_TRY(Hold(b->guest_.initramfs_path));
  const std::vector<std::string> own = {b->placeholder_, b->guest_.kernel_path,
                                        b->guest_.initramfs_path};
  for (const auto& f : own) Touch(f);
  PruneCache(opts.cache_dir, own);
  mkdir((opts.cache_dir + "/templates").c_str(), 0700);
  // Sockets of warm, template or fork-capture VMs an earlier run left (their QEMUs went with
  // their cgroups).
  if (DIR* d = opendir(b->RunDir().c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("warm-", 0) == 0 || n.rfind("template-", 0) == 0 || n.rfind("fork-", 0) == 0)
        unlink((b->RunDir() + "/" + n).c_str());
    }
    closedir(d);
  }
  if (opts.snapshots && opts.warm_pool > 0)
    b->filler_ = std::thread([raw = b.get()] { raw->FillLoop(); });
  spdlog::info("microvm: accelerator {} ({}); guest kernel {}", b->accel_.accel, b->accel_.reason,
               b->guest_.release);
  return b;
}

json MicrovmBackend::Info() const {
  return {{"accel", accel_.accel},
          {"accel_probe", accel_.reason},
          {"guest_kernel", guest_.release},
          {"snapshots", opts_.snapshots},
          {"restores", restores_.load()},
          {"cold_boots", cold_boots_.load()},
          {"vm_boots", full_os_boots_.load()},
          {"warm_pool", opts_.snapshots ? opts_.warm_pool : 0},
          {"warm_starts", warm_starts_.load()},
          {"forks", forks_.load()},
          {"fork_children", fork_children_.load()},
          {"warm_ready", warm_ready_.load()}};
}

std::vector<std::string> MicrovmBackend::QemuArgs(uint64_t ram_mib, int vcpus, size_t slots,
                                                  Mode mode, bool full_os,
                                                  std::optional<agent::DisplaySize> display) const {
  const bool kvm = accel_.accel == "kvm";
  std::string append = "console=ttyS0 reboot=t panic=-1 quiet loglevel=3";
  if (!kvm && tsc_khz_) append += " tsc_early_khz=" + std::to_string(tsc_khz_);
  // The image's init starts quietly too; its messages stay in its journal.
  if (full_os) append += " systemd.show_status=error";
  const std::string ram = std::to_string(ram_mib) + "M";
  // Device names: virtio over MMIO on microvm, over PCI on q35 (no option ROMs: the kernel
  // is loaded directly, nothing boots from the NIC).
  const std::string bus = full_os ? "-pci" : "-device";
  const std::string machine = full_os ? "q35" : "microvm";
  std::vector<std::string> a = {"-M",
                                mode == Mode::kCold ? machine : machine + ",memory-backend=ram"};
  if (mode != Mode::kCold) {
    // The template writes its RAM into our memfd (share=on); a restored VM maps the sealed
    // memfd copy-on-write (share=off): it starts with the template's memory without copying
    // it, and shares every page it does not write with the template and the other VMs.
    // A fork's capture shares its RAM with us too: the incoming migration fills our memfd.
    const bool shared = mode == Mode::kTemplate || mode == Mode::kCapture;
    a.insert(a.end(),
             {"-object", "memory-backend-file,id=ram,size=" + ram + ",mem-path=/proc/self/fd/" +
                             std::to_string(kRamFd) + ",share=" + (shared ? "on" : "off")});
  }
  a.insert(a.end(), {"-accel", kvm ? "kvm" : "tcg", "-cpu", kvm ? "host" : "max", "-m", ram, "-smp",
                     std::to_string(vcpus), "-nodefaults", "-no-user-config", "-display", "none",
                     "-no-reboot", "-sandbox",
                     "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
                     "-kernel", "/proc/self/fd/" + std::to_string(kKernelFd)});
  // A restored VM never reads its kernel or initramfs again (its RAM is the template's): it
  // gets the small compressed kernel, only so QEMU can set the machine up, and no initramfs.
  const bool incoming = mode == Mode::kRestore || mode == Mode::kCapture;
  if (!incoming) a.insert(a.end(), {"-initrd", "/proc/self/fd/" + std::to_string(kInitrdFd)});
  const std::string rom = full_os ? ",romfile=" : "";
  a.insert(a.end(),
           {"-append",  append,
            "-serial",  "stdio",
            "-device",  "virtio-serial" + bus + ",max_ports=2",
            "-chardev", "socket,id=agent,server=on,wait=off,fd=" + std::to_string(kAgentFd),
            "-device",  std::string("virtserialport,chardev=agent,name=") + agent::kAgentPortName,
            "-chardev", "socket,id=qmp,server=on,wait=off,fd=" + std::to_string(kQmpFd),
            "-mon",     "chardev=qmp,mode=control",
            "-object",  "rng-random,id=rng,filename=/dev/urandom",
            "-device",  "virtio-rng" + bus + ",rng=rng",
            "-netdev",  "tap,id=net0,fd=" + std::to_string(kTapFd),
            "-device",  "virtio-net" + bus + ",netdev=net0,mac=" + kTemplateMac + rom});
  for (size_t i = 0; i < slots; ++i) {
    const std::string n = std::to_string(i), set = std::to_string(i + 1);
    // Named nodes (file, then raw on top) so a warm VM's slot can be given another file.
    a.insert(
        a.end(),
        {"-add-fd", "fd=" + std::to_string(kFirstLayerFd + static_cast<int>(i)) + ",set=" + set,
         "-blockdev",
         "driver=file,node-name=file" + n + ",filename=/dev/fdset/" + set + ",read-only=on",
         "-blockdev", "driver=raw,node-name=layer" + n + ",file=file" + n + ",read-only=on",
         "-device", "virtio-blk" + bus + ",drive=layer" + n + ",serial=layer" + n});
  }
  if (display)
    for (const auto& d : QmpScreen::Devices(*display)) a.insert(a.end(), {"-device", d});
  // The state comes in through QMP once x-ignore-shared is set on this side too.
  if (incoming) a.insert(a.end(), {"-incoming", "defer"});
  return a;
}

Result<std::unique_ptr<MicrovmBoot>> MicrovmBackend::Launch(const LaunchSpec& spec) {
  const std::string& name = spec.name;
  const uint64_t ram_mib = spec.ram_mib;
  auto boot = std::make_unique<MicrovmBoot>();
  auto slot = uids_->Allocate();
  if (!slot) return Status(Code::kQuota, "allocate uid range", name, "all uid slots are in use");
  boot->slot = isolation::UidSlot(uids_, *slot);
  const uint32_t uid = boot->slot.range().host_base;
  boot->ram_mib = ram_mib;
  boot->vcpus = spec.vcpus;
  boot->memory_backend = spec.mode == Mode::kRestore;
  boot->cgroup = WARREN_TRY(isolation::Cgroup::Create(
      opts_.cgroup_parent, spec.cgroup_name,
      QemuLimits(ram_mib, spec.cpus,
                 spec.display ? QmpScreen::VideoMemoryBytes(*spec.display) : 0)));

  // QEMU listens for the agent channel and its monitor on sockets in our run directory, so a
  // node that restarted connects again (Adopt).
  boot->run_base = RunDir() + "/" + spec.cgroup_name;
  if (mkdir(RunDir().c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", RunDir());
  UniqueFd agent_listen = WARREN_TRY(sys::ListenUnix(boot->run_base + ".agent", SOCK_STREAM, 2));
  UniqueFd qmp_listen = WARREN_TRY(sys::ListenUnix(boot->run_base + ".qmp", SOCK_STREAM, 2));
  const bool bz = spec.mode == Mode::kRestore || spec.mode == Mode::kCapture;
  UniqueFd kernel = WARREN_TRY(
      Reopen(bz ? bzimage_fd_ : kernel_fd_, bz ? guest_.bzimage_path : guest_.kernel_path));
  UniqueFd initrd = WARREN_TRY(Reopen(initrd_fd_, guest_.initramfs_path));
  // Unused fixed slots get /dev/null, so the numbering never shifts.
  UniqueFd null_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_fd) return ErrnoStatus("open", "/dev/null");
  QemuLaunch l;
  l.binary = opts_.qemu;
  l.args =
      QemuArgs(ram_mib, spec.vcpus, spec.layer_fds.size(), spec.mode, spec.full_os, spec.display);
  l.fds = {agent_listen.get(),
           qmp_listen.get(),
           kernel.get(),
           initrd.get(),
           spec.state_fd >= 0 ? spec.state_fd : null_fd.get(),
           spec.ram_fd >= 0 ? spec.ram_fd : null_fd.get(),
           null_fd.get() /* the tap, made by the child */};
  l.tap_fd = kTapFd;
  l.bridge_eth0 = spec.bridge_eth0;
  l.fds.insert(l.fds.end(), spec.layer_fds.begin(), spec.layer_fds.end());
  l.uid = l.gid = uid;
  l.netns_fd = spec.netns_fd;
  l.cgroup_v2_fd = boot->cgroup.v2_fd();
  if (spdlog::should_log(spdlog::level::debug)) {  // not built on every create otherwise
    std::string joined;
    for (const auto& a : l.args) joined += " " + a;
    spdlog::debug("microvm {}: qemu{}", name, joined);
  }
  isolation::Cgroup* cg = &boot->cgroup;
  boot->qemu = WARREN_TRY(SpawnJailedQemu(l, [cg](pid_t pid) { return cg->AttachV1(pid); }));
  boot->cgroup.CloseCloneFd();
  agent_listen.Reset();
  qmp_listen.Reset();
  WARREN_RETURN_IF_ERROR(Connect(*boot, spec.session).Context("start microvm " + name));
  return boot;
}

isolation::CgroupLimits MicrovmBackend::QemuLimits(uint64_t ram_mib, double cpus,
                                                   uint64_t video_bytes) const {
  isolation::CgroupLimits limits;
  // Guest RAM plus QEMU itself (and, under TCG, its translation cache), and a screen's
  // video memory.
  limits.memory_bytes = ((ram_mib + (accel_.accel == "kvm" ? 256 : 768)) << 20) + video_bytes;
  limits.pids = 256;  // QEMU threads: vCPUs, I/O workers
  limits.cpus = cpus;
  return limits;
}

std::string MicrovmBackend::RunDir() const { return "/run/warren/" + opts_.cgroup_parent; }

Status MicrovmBackend::Connect(MicrovmBoot& boot, Session session) {
  UniqueFd agent = WARREN_TRY(sys::ConnectUnix(boot.run_base + ".agent", SOCK_STREAM));
  UniqueFd qmp = WARREN_TRY(sys::ConnectUnix(boot.run_base + ".qmp", SOCK_STREAM));
  if (session == Session::kNone) {
    boot.idle_agent = std::move(agent);
    boot.qmp = std::make_unique<QmpClient>(std::move(qmp));
    return boot.qmp->Handshake(30000);
  }
  const bool adopting = session == Session::kAdopt;
  int packet_sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, packet_sv) != 0)
    return ErrnoStatus("socketpair", "agent packets");
  boot.control.Reset(packet_sv[0]);
  UniqueFd packet_relay(packet_sv[1]);
  // The relay thread: agent frames between QEMU's chardev and our packet socket, and the
  // console drained into a bounded tail (the guest may write to it without end). Every
  // session starts with a sync each way; a node adopting a running VM skips whatever half
  // frame the old session left in the stream up to the guest's sync.
  boot.stop.Reset(eventfd(0, EFD_CLOEXEC));
  if (!boot.stop) return ErrnoStatus("eventfd", "microvm relay");
  MicrovmBoot* raw = &boot;
  boot.relay = std::thread(
      [raw, adopting, stream = std::move(agent), packets = std::move(packet_relay)]() mutable {
        agent::RelayOptions o;
        o.stop_fd = raw->stop.get();
        o.drain_fd = raw->qemu.console.get();
        o.on_drain = [raw](std::string_view s) {
          std::lock_guard lock(raw->console_mu);
          raw->console.append(s);
          if (raw->console.size() > kConsoleTail)
            raw->console.erase(0, raw->console.size() - kConsoleTail);
        };
        const std::string_view first = adopting ? agent::kAdoptFrame : agent::kSyncFrame;
        Status st = send(stream.get(), first.data(), first.size(), MSG_NOSIGNAL) ==
                            static_cast<ssize_t>(first.size())
                        ? Status::Ok()
                        : ErrnoStatus("send", "agent stream");
        if (st.ok() && adopting) {
          auto rest = agent::AwaitSync(stream.get(), raw->stop.get(), 30000);
          if (rest.ok())
            o.initial = std::move(*rest);
          else
            st = rest.status();
        }
        if (st.ok()) st = agent::RelayFrames(stream.get(), packets.get(), o);
        if (!st.ok()) spdlog::warn("microvm agent relay: {}", st.ToString());
      });
  boot.qmp = std::make_unique<QmpClient>(std::move(qmp));
  Status st = boot.qmp->Handshake(30000);
  if (!st.ok()) return st.Context("console: " + boot.ConsoleTail());
  return Status::Ok();
}

Result<std::unique_ptr<Instance>> MicrovmBackend::Adopt(const std::string& id) {
  auto rec = WARREN_TRY(ReadRecord(id));
  auto boot = std::make_unique<MicrovmBoot>();
  boot->run_base = RunDir() + "/" + id;
  const int pid = rec.value("pid", 0);
  const uint32_t slot = rec.value("slot", 0u);
  boot->cgroup = WARREN_TRY(isolation::Cgroup::Open(opts_.cgroup_parent, id));
  // The pidfd first, then the check that it is the sandbox's QEMU: a recycled pid is never
  // signalled.
  UniqueFd pidfd(pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1);
  if (!pidfd) return Status(Code::kNotFound, "adopt microvm", id, "its QEMU is gone");
  if (!boot->cgroup.Holds(pid))
    return Status(Code::kNotFound, "adopt microvm", id,
                  "pid " + std::to_string(pid) + " is not its QEMU");
  boot->qemu.pid = pid;
  boot->qemu.pidfd = std::move(pidfd);
  boot->qemu.adopted = true;
  if (!uids_->Claim(slot)) return Status(Code::kConflict, "adopt microvm", id, "uid slot in use");
  boot->slot = isolation::UidSlot(uids_, slot);
  boot->ram_mib = rec.value("ram_mib", uint64_t{0});
  boot->vcpus = rec.value("vcpus", 1);
  boot->memory_backend = rec.value("memory_backend", false) && boot->ram_mib > 0;
  WARREN_RETURN_IF_ERROR(Connect(*boot, Session::kAdopt).Context("adopt microvm " + id));
  boot->record = RunDir() + "/" + id + ".vm.json";
  const uint32_t uid = boot->slot.range().host_base;
  UniqueFd control = std::move(boot->control);
  isolation::Cgroup* cg = &boot->cgroup;
  return std::unique_ptr<Instance>(std::make_unique<MicrovmInstance>(
      std::move(boot), pid, uid, std::move(control),
      [cg](bool frozen) { return cg->Freeze(frozen); }, QuietCpus(), RecordDisplay(rec)));
}

bool MicrovmBackend::Owns(const std::string& id) const {
  return access((RunDir() + "/" + id + ".vm.json").c_str(), F_OK) == 0;
}

Result<json> MicrovmBackend::ReadRecord(const std::string& id) const {
  const std::string path = RunDir() + "/" + id + ".vm.json";
  std::ifstream f(path);
  if (!f) return NotFound("microvm record", path);
  json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Invalid("malformed microvm record", path);
  return j;
}

Result<std::shared_ptr<MicrovmBackend::Template>> MicrovmBackend::TemplateFor(uint64_t ram_mib,
                                                                              int vcpus) {
  // Everything the saved state depends on: a change to any of it makes a new template.
  std::string recipe = guest_.digest + "\n" + qemu_version_ + "\n" + accel_.accel + "\n";
  for (const auto& a : QemuArgs(ram_mib, vcpus, kLayerSlots, Mode::kRestore)) recipe += a + "\n";
  const std::string key = Sha256Hex(recipe).substr(0, 20);
  std::shared_ptr<Template> t;
  {
    std::lock_guard lock(mu_);
    auto& slot = templates_[key];
    if (!slot) {
      slot = std::make_shared<Template>();
      slot->state_path = opts_.cache_dir + "/templates/" + key + ".state";
      slot->ram_path = opts_.cache_dir + "/templates/" + key + ".ram";
      slot->ram_mib = ram_mib;
      slot->vcpus = vcpus;
    }
    t = slot;
  }
  std::lock_guard lock(t->mu);  // one maker; the others wait for its result
  // A failure is retried a minute later (a template boot can time out on a host under load);
  // until then sandboxes of this size boot cold.
  if (!t->ready && (t->error.ok() || NowMs() - t->failed_at_ms > kTemplateRetryMs)) {
    const int64_t t0 = NowMs();
    const bool saved =
        access(t->state_path.c_str(), R_OK) == 0 && access(t->ram_path.c_str(), R_OK) == 0;
    t->error = saved ? LoadTemplate(*t, ram_mib) : MakeTemplate(*t, ram_mib, vcpus);
    if (t->error.ok()) {
      auto held = Hold(t->state_path);
      if (held.ok())
        t->state = std::move(*held);
      else
        t->error = held.status();
    }
    if (t->error.ok()) {
      Touch(t->state_path);
      Touch(t->ram_path);
      t->ready = true;
      spdlog::info("microvm: template {} MiB x{} {} in {} ms", ram_mib, vcpus,
                   saved ? "loaded" : "made", NowMs() - t0);
    } else {
      t->failed_at_ms = NowMs();
      spdlog::warn("microvm: no template for {} MiB x{}: {}", ram_mib, vcpus, t->error.ToString());
    }
  }
  if (!t->ready) return t->error;
  return t;
}

namespace {

// Copies the data extents of `from` to `to` at the same offsets (both sparse-aware).
Status CopySparse(int from, int to, const std::string& what) {
  std::string buf(1 << 20, '\0');
  off_t pos = 0;
  for (;;) {
    off_t data = lseek(from, pos, SEEK_DATA);
    if (data < 0) break;  // ENXIO: no more data
    off_t hole = lseek(from, data, SEEK_HOLE);
    if (hole < 0) return ErrnoStatus("seek", what);
    for (off_t off = data; off < hole;) {
      ssize_t n =
          pread(from, buf.data(), std::min<off_t>(hole - off, static_cast<off_t>(buf.size())), off);
      if (n <= 0) return ErrnoStatus("read", what);
      if (pwrite(to, buf.data(), static_cast<size_t>(n), off) != n)
        return ErrnoStatus("write", what);
      off += n;
    }
    pos = hole;
  }
  return Status::Ok();
}

}  // namespace

Status MicrovmBackend::LoadTemplate(Template& t, uint64_t ram_mib) {
  UniqueFd file(open(t.ram_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file) return ErrnoStatus("open", t.ram_path);
  UniqueFd ram = WARREN_TRY(NewRamMemfd(ram_mib));
  WARREN_RETURN_IF_ERROR(CopySparse(file.get(), ram.get(), t.ram_path));
  WARREN_RETURN_IF_ERROR(SealRam(ram.get()));
  t.ram = std::move(ram);
  return Status::Ok();
}

Status MicrovmBackend::MakeTemplate(Template& t, uint64_t ram_mib, int vcpus) {
  UniqueFd ph = WARREN_TRY(Reopen(placeholder_fd_, placeholder_));
  UniqueFd ram = WARREN_TRY(NewRamMemfd(ram_mib));
  LaunchSpec ls =
      PlaceholderLaunch("template-" + HexRandom(4), ram_mib, vcpus, Mode::kTemplate, ph.get());
  ls.name = "template";
  ls.ram_fd = ram.get();
  auto boot = WARREN_TRY(Launch(ls));
  // The guest agent says hello once it waits for its setup: that is the moment to save.
  WARREN_RETURN_IF_ERROR(boot->Await("hello", kColdBootTimeoutMs, "boot template").status());

  const std::string suffix = ".tmp" + std::to_string(getpid());  // daemons may share the cache
  const std::string state_tmp = t.state_path + suffix, ram_tmp = t.ram_path + suffix;
  Cleanup rm_tmp([&] {
    unlink(state_tmp.c_str());
    unlink(ram_tmp.c_str());
  });
  UniqueFd out(open(state_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) return ErrnoStatus("create", state_tmp);
  QmpClient& q = *boot->qmp;
  // The RAM is in our memfd already: the stream carries only the devices' state.
  WARREN_RETURN_IF_ERROR(
      q.Execute("migrate-set-capabilities",
                {{"capabilities", {{{"capability", "x-ignore-shared"}, {"state", true}}}}})
          .status());
  WARREN_RETURN_IF_ERROR(q.Execute("stop").status());
  WARREN_RETURN_IF_ERROR(q.Execute("getfd", {{"fdname", "state"}}, 10000, out.get()).status());
  WARREN_RETURN_IF_ERROR(q.Execute("migrate", {{"uri", "fd:state"}}).status());
  WARREN_RETURN_IF_ERROR(AwaitMigration(q, 60000, "save template"));
  boot.reset();  // QEMU gone: no writable shared mapping of the RAM is left, so it can be sealed
  WARREN_RETURN_IF_ERROR(SealRam(ram.get()));
  // Kept on disk (sparse) so a restarted daemon does not boot the template again.
  {
    UniqueFd rf(open(ram_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!rf) return ErrnoStatus("create", ram_tmp);
    if (ftruncate(rf.get(), static_cast<off_t>(ram_mib << 20)) != 0)
      return ErrnoStatus("ftruncate", ram_tmp);
    WARREN_RETURN_IF_ERROR(CopySparse(ram.get(), rf.get(), ram_tmp));
    if (fsync(rf.get()) != 0) return ErrnoStatus("fsync", ram_tmp);
  }
  if (fsync(out.get()) != 0) return ErrnoStatus("fsync", state_tmp);
  // RAM first: a state file is only ever next to its complete RAM image.
  if (rename(ram_tmp.c_str(), t.ram_path.c_str()) != 0) return ErrnoStatus("rename", t.ram_path);
  if (rename(state_tmp.c_str(), t.state_path.c_str()) != 0)
    return ErrnoStatus("rename", t.state_path);
  rm_tmp.Cancel();
  t.ram = std::move(ram);
  return Status::Ok();
}

Result<std::unique_ptr<MicrovmBoot>> MicrovmBackend::MakeWarm(Template& t) {
  UniqueFd ph = WARREN_TRY(Reopen(placeholder_fd_, placeholder_));
  UniqueFd state = WARREN_TRY(Reopen(t.state, t.state_path));
  LaunchSpec ls =
      PlaceholderLaunch("warm-" + HexRandom(6), t.ram_mib, t.vcpus, Mode::kRestore, ph.get());
  ls.state_fd = state.get();
  ls.ram_fd = t.ram.get();
  auto boot = WARREN_TRY(Launch(ls));
  WARREN_RETURN_IF_ERROR(
      Restore(*boot->qmp).Context("restore warm VM (console: " + boot->ConsoleTail() + ")"));
  // The rehearsal (agent/vm_init.h): the sandbox's setup then runs on translated code.
  WARREN_RETURN_IF_ERROR(agent::Send(boot->control.get(), agent::Message{{{"t", "warmup"}}, ""}));
  auto m = WARREN_TRY(boot->Await("warm", kSetupTimeoutMs, "warm up " + ls.name));
  if (const std::string err = m.header.value("error", ""); !err.empty())
    spdlog::warn("microvm: warm-up rehearsal: {}", err);  // the VM is still good, only slower
  spdlog::debug("microvm: {} warmed up in {} ms", ls.name, m.header.value("ms", 0));
  return boot;
}

std::unique_ptr<MicrovmBoot> MicrovmBackend::TakeWarm(Template& t) {
  std::unique_ptr<MicrovmBoot> b;
  {
    std::lock_guard lock(mu_);
    t.wanted = true;
    t.last_wanted_ms = NowMs();
    // A VM whose QEMU died while waiting is not handed out.
    while (!t.warm.empty() && !b) {
      b = std::move(t.warm.front());
      t.warm.pop_front();
      --warm_ready_;
      pollfd p{b->qemu.pidfd.get(), POLLIN, 0};
      if (poll(&p, 1, 0) != 0) b.reset();
    }
  }
  fill_cv_.notify_one();
  return b;
}

Status MicrovmBackend::HandOver(MicrovmBoot& boot, const SandboxConfig& cfg,
                                const std::vector<int>& layer_fds) {
  QmpClient& q = *boot.qmp;
  // Each layer behind its slot: the fd into a new fd set, a file node on it, and the slot's
  // raw node reopened onto that file (the guest drops its cache of the disk at setup).
  for (size_t i = 0; i < layer_fds.size(); ++i) {
    const std::string n = std::to_string(i);
    json added = WARREN_TRY(
        q.Execute("add-fd", {{"fdset-id", 100 + static_cast<int>(i)}}, 10000, layer_fds[i]));
    const std::string file = "sandbox-file" + n;
    WARREN_RETURN_IF_ERROR(
        q.Execute("blockdev-add",
                  {{"driver", "file"},
                   {"node-name", file},
                   {"filename", "/dev/fdset/" + std::to_string(added.value("fdset-id", 0))},
                   {"read-only", true}})
            .status());
    WARREN_RETURN_IF_ERROR(q.Execute("blockdev-reopen", {{"options",
                                                          {{{"driver", "raw"},
                                                            {"node-name", "layer" + n},
                                                            {"file", file},
                                                            {"read-only", true}}}}})
                               .status());
  }
  // Into a cgroup of the sandbox's name and limits (cgroup2 cannot rename); the warm one,
  // empty then, is removed by the assignment.
  auto cg = WARREN_TRY(
      isolation::Cgroup::Create(opts_.cgroup_parent, cfg.id, QemuLimits(boot.ram_mib, cfg.cpus)));
  cg.CloseCloneFd();
  if (Status st = cg.Enter(boot.qemu.pid); !st.ok()) {
    (void)boot.cgroup.Enter(boot.qemu.pid);  // back where it was, so both groups can go
    return st;
  }
  boot.cgroup = std::move(cg);
  // The sockets a restarted node adopts the VM through are named after the sandbox.
  const std::string base = RunDir() + "/" + cfg.id;
  for (const char* ext : {".agent", ".qmp"})
    if (rename((boot.run_base + ext).c_str(), (base + ext).c_str()) != 0)
      return ErrnoStatus("rename", boot.run_base + ext);
  boot.run_base = base;
  return Status::Ok();
}

void MicrovmBackend::FillLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    std::shared_ptr<Template> need;
    // After 3 failures in a row a size's pool rests for a minute (a host under memory
    // pressure, say), then tries again.
    fill_cv_.wait_for(lock, std::chrono::seconds(10), [&] {
      if (stopping_) return true;
      for (auto& [key, t] : templates_)
        if (t->ready && t->wanted &&
            (t->warm_failures < 3 || NowMs() - t->warm_failed_at_ms > 60000) &&
            static_cast<int>(t->warm.size()) + t->warm_making < opts_.warm_pool) {
          need = t;
          return true;
        }
      return false;
    });
    // A size nobody asked for in 10 minutes gives its warm VMs back (memory, uid slots).
    std::vector<std::unique_ptr<MicrovmBoot>> idle;
    for (auto& [key, t] : templates_) {
      if (t->wanted ? NowMs() - t->last_wanted_ms < kWarmIdleMs : t->warm.empty()) continue;
      t->wanted = false;
      for (auto& b : t->warm) idle.push_back(std::move(b));
      warm_ready_ -= static_cast<int>(t->warm.size());
      t->warm.clear();
    }
    if (!idle.empty()) {
      lock.unlock();
      idle.clear();  // their QEMUs are killed, outside the lock
      lock.lock();
    }
    if (need && !need->wanted) need.reset();
    if (!stopping_ && !need) continue;
    if (stopping_) {
      for (auto& [key, t] : templates_) t->warm.clear();  // their QEMUs are killed
      warm_ready_ = 0;
      return;
    }
    ++need->warm_making;
    lock.unlock();
    auto warm = MakeWarm(*need);
    lock.lock();
    --need->warm_making;
    if (warm.ok()) {
      need->warm_failures = 0;
      need->warm.push_back(std::move(*warm));
      ++warm_ready_;
    } else {
      ++need->warm_failures;
      need->warm_failed_at_ms = NowMs();
      spdlog::warn("microvm: warm VM for {} MiB x{}: {}", need->ram_mib, need->vcpus,
                   warm.status().ToString());
    }
  }
}

Result<std::unique_ptr<Instance>> MicrovmBackend::Create(const SandboxConfig& cfg) {
  const uint64_t ram = GuestRamMiB(cfg.memory_bytes);
  const int vcpus = GuestVcpus(cfg.cpus);
  if (cfg.layers.empty()) return Invalid("no layers", cfg.id);
  if (cfg.memory) return CreateFromFork(cfg);
  std::vector<UniqueFd> owned;
  std::vector<int> fds;
  WARREN_RETURN_IF_ERROR(OpenLayers(cfg, &owned, &fds));
  std::shared_ptr<Template> tmpl;
  UniqueFd state;
  // A full OS boots cold: its init's start is the sandbox's own (no template to restore).
  if (opts_.snapshots && !cfg.full_os && cfg.layers.size() <= kLayerSlots) {
    auto t = TemplateFor(ram, vcpus);
    if (t.ok()) {
      auto st = Reopen((*t)->state, (*t)->state_path);
      if (st.ok())
        state = std::move(*st), tmpl = *t;
      else
        spdlog::warn("microvm: {}", st.status().ToString());
    }
  }
  LaunchSpec ls;
  ls.name = ls.cgroup_name = cfg.id;
  ls.ram_mib = ram;
  ls.vcpus = vcpus;
  ls.cpus = cfg.cpus;
  ls.netns_fd = cfg.netns_fd;
  ls.bridge_eth0 = cfg.net_ip != 0;
  ls.full_os = cfg.full_os;
  if (cfg.full_os) ls.display = cfg.display;
  if (tmpl) {
    UniqueFd ph = WARREN_TRY(Reopen(placeholder_fd_, placeholder_));
    while (fds.size() < kLayerSlots) fds.push_back(ph.get());
    owned.push_back(std::move(ph));
    ls.mode = Mode::kRestore;
    ls.state_fd = state.get();
    ls.ram_fd = tmpl->ram.get();
  }
  ls.layer_fds = fds;
  const int64_t t0 = NowMs();
  // A warm VM if there is one: network none only (a warm VM's namespace has no link to the
  // node's bridge).
  std::unique_ptr<MicrovmBoot> boot;
  if (tmpl && opts_.warm_pool > 0 && cfg.netns_fd < 0 && cfg.net_ip == 0) {
    boot = TakeWarm(*tmpl);
    if (boot) {
      std::vector<int> layers(fds.begin(), fds.begin() + static_cast<long>(cfg.layers.size()));
      Status st = HandOver(*boot, cfg, layers);
      if (st.ok()) {
        ++warm_starts_;
      } else {
        spdlog::warn("microvm {}: warm VM not usable, restoring one: {}", cfg.id, st.ToString());
        boot.reset();
      }
    }
  }
  const bool warm = boot != nullptr;
  if (!boot) boot = WARREN_TRY(Launch(ls));
  const int64_t t_launched = NowMs();
  owned.clear();
  state.Reset();
  if (warm) {
    ++restores_;
  } else if (tmpl) {
    WARREN_RETURN_IF_ERROR(
        Restore(*boot->qmp)
            .Context("restore " + cfg.id + " (console: " + boot->ConsoleTail() + ")"));
    ++restores_;
  } else {
    WARREN_RETURN_IF_ERROR(boot->Await("", kColdBootTimeoutMs, "boot " + cfg.id).status());
    ++(cfg.full_os ? full_os_boots_ : cold_boots_);
  }
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  agent::SetupMessage setup = CommonSetup(cfg);
  setup.loopback = false;  // up since the guest's init (vm_init.cc)
  setup.landlock = false;
  agent::VmSetup& vm = setup.vm.emplace();
  vm.full_os = cfg.full_os;
  for (size_t i = 0; i < cfg.layers.size(); ++i)
    vm.layer_serials.push_back("layer" + std::to_string(i));
  vm.memory_bytes = cfg.memory_bytes;
  vm.pids = cfg.pids;
  vm.seed = HexRandom(32);
  vm.now_ns = int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
  if (cfg.net_ip)
    vm.net = agent::VmSetup::Net{Ip4(cfg.net_ip), Ip4(cfg.net_gateway), GuestMac(cfg.net_ip),
                                 cfg.net_ip6, cfg.net_gateway6};
  const int64_t t_running = NowMs();
  WARREN_RETURN_IF_ERROR(agent::Send(boot->control.get(), agent::Message{agent::ToJson(setup), ""})
                             .Context("setup " + cfg.id));
  // A full OS answers once its init has started the agent's service: a boot, not a setup.
  auto reply =
      boot->Await("", cfg.full_os ? kColdBootTimeoutMs : kSetupTimeoutMs, "create " + cfg.id);
  if (!reply.ok()) return reply.status();
  const std::string t = reply->header.value("t", "");
  if (t == "setup_failed")
    return Internal("create sandbox", cfg.id,
                    "guest agent setup failed: " + reply->header.value("error", ""));
  if (t != "ready") return Internal("create sandbox", cfg.id, "unexpected agent message " + t);
  if (auto ready = agent::ParseReady(reply->header); !ready.ok())
    return Internal("create sandbox", cfg.id, ready.status().ToString());
  spdlog::info("{} {}: QEMU started in {} ms, guest {} in {} ms, agent setup {} ms {} (init: {})",
               cfg.full_os ? "vm" : "microvm", cfg.id, t_launched - t0,
               warm   ? "warm"
               : tmpl ? "restored"
                      : "booted",
               t_running - t_launched, NowMs() - t_running,
               reply->header.value("setup_ms", json::object()).dump(),
               reply->header.value("init", ""));

  const int pid = boot->qemu.pid;
  const uint32_t uid = boot->slot.range().host_base;
  WARREN_RETURN_IF_ERROR(WriteRecord(*boot, cfg, ls.display));
  UniqueFd control = std::move(boot->control);
  isolation::Cgroup* cg = &boot->cgroup;
  return std::unique_ptr<Instance>(std::make_unique<MicrovmInstance>(
      std::move(boot), pid, uid, std::move(control),
      [cg](bool frozen) { return cg->Freeze(frozen); }, QuietCpus(), ls.display));
}

// What a restarted node needs to take this VM over (Adopt), and to fork it after that.
Status MicrovmBackend::WriteRecord(MicrovmBoot& boot, const SandboxConfig& cfg,
                                   const std::optional<agent::DisplaySize>& display) {
  const std::string path = RunDir() + "/" + cfg.id + ".vm.json", tmp = path + ".tmp";
  json rec{{"id", cfg.id},
           {"pid", boot.qemu.pid},
           {"slot", boot.slot.slot()},
           {"wired", cfg.net_ip != 0},
           {"full_os", cfg.full_os},
           {"memory_backend", boot.memory_backend},
           {"ram_mib", boot.ram_mib},
           {"vcpus", boot.vcpus}};
  if (display) rec["display"] = json{{"width", display->width}, {"height", display->height}};
  const std::string doc = rec.dump();
  UniqueFd f(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!f || write(f.get(), doc.data(), doc.size()) != static_cast<ssize_t>(doc.size()) ||
      rename(tmp.c_str(), path.c_str()) != 0)
    return ErrnoStatus("write", path);
  boot.record = path;
  return Status::Ok();
}

}  // namespace warren::runtime::vm
