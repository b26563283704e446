// Memory forks of microVMs (issue 30): one running microVM becomes many, each carrying on
// with the parent's processes and memory.
//
// QEMU 7.2 migrates only through a stream (fd:), so a fork is two migrations. The parent,
// stopped, sends its RAM and devices into a capture QEMU whose RAM is a memfd shared with us
// (kCapture); the parent then runs on. The capture saves its device state alone (its RAM is
// in the memfd already, x-ignore-shared), exits, and the memfd is sealed: from then on the
// fork is exactly a template (microvm_backend.h), and each child restores it copy-on-write,
// then takes its own identity from the node (agent::VmRefreshMessage).
#include <fcntl.h>
#include <linux/falloc.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "agent/protocol.h"
#include "agent/setup_messages.h"
#include "base/cleanup.h"
#include "runtime/vm/microvm_backend.h"
#include "runtime/vm/microvm_boot.h"

namespace warren::runtime::vm {

using nlohmann::json;

namespace {

constexpr int kForkMigrateTimeoutMs = 120000;  // 1 GiB of guest RAM under TCG on a busy host
// 64 GiB/s: QEMU's default (128 MiB/s) would throttle a copy from a stopped parent.
constexpr uint64_t kUnthrottled = uint64_t{1} << 36;

// The incoming migration reads every page it is sent to check whether it is zero, and a
// shared memfd allocates a page on each read: the capture ends as large as the guest's RAM.
// The guest's free pages are zero and no child reads them, so they go back as holes.
Status PunchZeroPages(int fd, uint64_t bytes) {
  constexpr size_t kChunk = 2 << 20, kPage = 4096;
  std::string buf(kChunk, '\0');
  for (uint64_t off = 0; off < bytes; off += kChunk) {
    const ssize_t n = pread(fd, buf.data(), kChunk, static_cast<off_t>(off));
    if (n < 0) return ErrnoStatus("read", "fork RAM");
    if (n == 0) break;
    // Runs of zero pages, each punched once.
    size_t run = 0;
    auto punch = [&](size_t end) -> Status {
      if (end > run && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                 static_cast<off_t>(off + run), static_cast<off_t>(end - run)) != 0)
        return ErrnoStatus("punch a hole", "fork RAM");
      return Status::Ok();
    };
    for (size_t p = 0; p < static_cast<size_t>(n); p += kPage) {
      const char* page = buf.data() + p;
      const bool zero = page[0] == 0 && memcmp(page, page + 1, kPage - 1) == 0;
      if (!zero) {
        WARREN_RETURN_IF_ERROR(punch(p));
        run = p + kPage;
      }
    }
    WARREN_RETURN_IF_ERROR(punch(static_cast<size_t>(n)));
  }
  return Status::Ok();
}

Status SetIgnoreShared(QmpClient& q, bool on) {
  return q
      .Execute("migrate-set-capabilities",
               {{"capabilities", {{{"capability", "x-ignore-shared"}, {"state", on}}}}})
      .status();
}

}  // namespace

Result<std::shared_ptr<MemoryImage>> MicrovmBackend::CaptureFork(
    Instance& parent, const std::function<void()>& while_stopped) {
  auto* vm = dynamic_cast<MicrovmInstance*>(&parent);
  if (!vm) return Status(Code::kUnavailable, "fork memory", "sandbox", "not a microVM");
  std::shared_ptr<MemoryImage> image;
  WARREN_RETURN_IF_ERROR(vm->WithBoot([&](MicrovmBoot& boot) -> Status {
    if (!boot.memory_backend || boot.ram_mib == 0)
      return Status(Code::kUnavailable, "fork memory", "microvm",
                    "booted cold (no memory backend to copy from)");
    auto made = Capture(boot, while_stopped);
    if (!made.ok()) return made.status();
    image = std::move(*made);
    return Status::Ok();
  }));
  return image;
}

Result<std::shared_ptr<MemoryImage>> MicrovmBackend::Capture(
    MicrovmBoot& parent, const std::function<void()>& while_stopped) {
  const int64_t t0 = NowMs();
  auto image = std::make_shared<MemoryImage>();
  image->ram_mib = parent.ram_mib;
  image->vcpus = parent.vcpus;
  image->ram = WARREN_TRY(NewRamMemfd(parent.ram_mib, "warren-fork-ram"));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return ErrnoStatus("socketpair", "fork migration");
  UniqueFd to_parent(sv[0]), to_capture(sv[1]);

  // The capture starts before the parent stops: QEMU's own start stays out of its pause.
  // Its devices are the restore's (the same arguments but share=on); its disks are
  // placeholders, never read (its guest never runs).
  UniqueFd ph = WARREN_TRY(Reopen(placeholder_fd_, placeholder_));
  LaunchSpec ls = PlaceholderLaunch("fork-" + HexRandom(6), parent.ram_mib, parent.vcpus,
                                    Mode::kCapture, ph.get());
  ls.state_fd = to_capture.get();
  ls.ram_fd = image->ram.get();
  ls.session = Session::kNone;
  auto capture = WARREN_TRY(Launch(ls));
  to_capture.Reset();
  ph.Reset();
  QmpClient& cq = *capture->qmp;
  QmpClient& pq = *parent.qmp;
  // x-ignore-shared off on both ends: the capture's RAM is shared, and its incoming side
  // refuses pages of an ignored block; the flag also changes the stream's block headers.
  WARREN_RETURN_IF_ERROR(SetIgnoreShared(cq, false));
  WARREN_RETURN_IF_ERROR(
      cq.Execute("migrate-incoming", {{"uri", "fd:" + std::to_string(kStateFd)}}).status());
  WARREN_RETURN_IF_ERROR(SetIgnoreShared(pq, false));
  WARREN_RETURN_IF_ERROR(
      pq.Execute("migrate-set-parameters", {{"max-bandwidth", kUnthrottled}}).status());

  WARREN_RETURN_IF_ERROR(pq.Execute("stop").status());
  const int64_t stopped_at = NowMs();
  // Whatever fails from here on, the parent runs again (`cont` from postmigrate also takes
  // its disks back).
  Cleanup resume_parent([&] {
    (void)pq.Execute("migrate_cancel");
    if (Status st = pq.Execute("cont").status(); !st.ok())
      spdlog::error("microvm fork: the parent stays stopped: {}", st.ToString());
  });
  WARREN_RETURN_IF_ERROR(
      pq.Execute("getfd", {{"fdname", "fork"}}, 10000, to_parent.get()).status());
  to_parent.Reset();
  WARREN_RETURN_IF_ERROR(pq.Execute("migrate", {{"uri", "fd:fork"}}).status());
  WARREN_RETURN_IF_ERROR(AwaitMigration(pq, kForkMigrateTimeoutMs, "copy the parent's memory"));
  WARREN_RETURN_IF_ERROR(
      AwaitIncoming(cq, "paused", kForkMigrateTimeoutMs, "take in the parent's memory"));
  if (while_stopped) while_stopped();
  resume_parent.Cancel();
  if (Status st = pq.Execute("cont").status(); !st.ok())
    return Internal("fork memory", "microvm", "the parent did not run again: " + st.ToString());
  image->paused_ms = NowMs() - stopped_at;

  // The capture's devices alone (its RAM is in our memfd already).
  image->state.Reset(memfd_create("warren-fork-state", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!image->state) return ErrnoStatus("memfd_create", "fork state");
  WARREN_RETURN_IF_ERROR(SetIgnoreShared(cq, true));
  WARREN_RETURN_IF_ERROR(
      cq.Execute("getfd", {{"fdname", "state"}}, 10000, image->state.get()).status());
  WARREN_RETURN_IF_ERROR(cq.Execute("migrate", {{"uri", "fd:state"}}).status());
  WARREN_RETURN_IF_ERROR(AwaitMigration(cq, kForkMigrateTimeoutMs, "save the fork's state"));
  capture.reset();  // QEMU gone: no writable shared mapping is left, so the RAM can be sealed
  WARREN_RETURN_IF_ERROR(PunchZeroPages(image->ram.get(), image->ram_mib << 20));
  WARREN_RETURN_IF_ERROR(SealRam(image->ram.get(), "fork RAM"));
  WARREN_RETURN_IF_ERROR(SealRam(image->state.get(), "fork state"));
  struct stat sb;
  if (fstat(image->ram.get(), &sb) == 0)
    image->ram_bytes = static_cast<uint64_t>(sb.st_blocks) * 512;
  image->capture_ms = NowMs() - t0;
  ++forks_;
  spdlog::info("microvm fork: {} MiB captured in {} ms (parent stopped {} ms, {} MiB held)",
               image->ram_mib, image->capture_ms, image->paused_ms, image->ram_bytes >> 20);
  return image;
}

Result<std::unique_ptr<Instance>> MicrovmBackend::CreateFromFork(const SandboxConfig& cfg) {
  const MemoryImage& image = *cfg.memory;
  if (cfg.full_os) return Invalid("a memory fork of a whole VM", cfg.id);
  if (cfg.layers.size() > kLayerSlots)
    return Invalid("a memory fork with more than " + std::to_string(kLayerSlots) + " layers",
                   cfg.id);
  // Its RAM and CPUs are the parent's: a different size would not load.
  const int vcpus = GuestVcpus(cfg.cpus);
  if (GuestRamMiB(cfg.memory_bytes) != image.ram_mib || vcpus != image.vcpus)
    return Invalid("a memory fork's memory and CPUs must be its parent's", cfg.id);
  std::vector<UniqueFd> owned;
  std::vector<int> fds;
  WARREN_RETURN_IF_ERROR(OpenLayers(cfg, &owned, &fds));
  UniqueFd ph = WARREN_TRY(Reopen(placeholder_fd_, placeholder_));
  while (fds.size() < kLayerSlots) fds.push_back(ph.get());
  UniqueFd state = WARREN_TRY(Reopen(image.state, "fork state"));
  LaunchSpec ls;
  ls.name = ls.cgroup_name = cfg.id;
  ls.ram_mib = image.ram_mib;
  ls.vcpus = image.vcpus;
  ls.cpus = cfg.cpus;
  ls.netns_fd = cfg.netns_fd;
  ls.bridge_eth0 = cfg.net_ip != 0;
  ls.mode = Mode::kRestore;
  ls.layer_fds = fds;
  ls.state_fd = state.get();
  ls.ram_fd = image.ram.get();
  // The guest's agent was in its parent's session: the child's node takes it over.
  ls.session = Session::kAdopt;
  const int64_t t0 = NowMs();
  auto boot = WARREN_TRY(Launch(ls));
  owned.clear();
  ph.Reset();
  state.Reset();
  const int64_t t_launched = NowMs();
  WARREN_RETURN_IF_ERROR(
      Restore(*boot->qmp)
          .Context("restore the fork " + cfg.id + " (console: " + boot->ConsoleTail() + ")"));
  const int64_t t_running = NowMs();
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  agent::VmRefreshMessage refresh;
  refresh.hostname = cfg.hostname;
  refresh.env = cfg.env;
  refresh.seed = HexRandom(32);
  refresh.now_ns = int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
  if (cfg.net_ip)
    refresh.net = agent::VmSetup::Net{Ip4(cfg.net_ip), Ip4(cfg.net_gateway), GuestMac(cfg.net_ip),
                                      cfg.net_ip6, cfg.net_gateway6};
  WARREN_RETURN_IF_ERROR(
      agent::Send(boot->control.get(), agent::Message{agent::ToJson(refresh), ""})
          .Context("refresh the fork " + cfg.id));
  // Before `resume` the agent sends only its answer and exits of the parent's commands
  // (which this node does not follow).
  for (;;) {
    auto m = WARREN_TRY(boot->Await("", kSetupTimeoutMs, "refresh the fork " + cfg.id));
    const std::string t = m.header.value("t", "");
    if (t == "refreshed") break;
    if (t == "err")
      return Internal("create sandbox", cfg.id,
                      "the fork's agent refused its identity: " + m.header.value("error", ""));
  }
  spdlog::info("microvm {}: forked; QEMU started in {} ms, restored in {} ms, refreshed in {} ms",
               cfg.id, t_launched - t0, t_running - t_launched, NowMs() - t_running);
  ++fork_children_;
  WARREN_RETURN_IF_ERROR(WriteRecord(*boot, cfg, std::nullopt));
  const int pid = boot->qemu.pid;
  const uint32_t uid = boot->slot.range().host_base;
  UniqueFd control = std::move(boot->control);
  isolation::Cgroup* cg = &boot->cgroup;
  return std::unique_ptr<Instance>(std::make_unique<MicrovmInstance>(
      std::move(boot), pid, uid, std::move(control),
      [cg](bool frozen) { return cg->Freeze(frozen); }, QuietCpus(), std::nullopt));
}

}  // namespace warren::runtime::vm
