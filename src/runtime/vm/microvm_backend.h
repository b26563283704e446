// The microvm backend: each sandbox is a QEMU `-M microvm` guest with warren-agent as init.
// The same class runs backend vm (SandboxConfig::full_os): a q35 PC with virtio over PCI,
// booted cold, where the agent builds the root as in a microVM, then hands PID 1 over to the
// image's own init (systemd) and comes back as its service (agent/vm_init.h).
//
// The guest boots Debian's kernel with our initramfs (guest_image.h). The sandbox's layers are
// read-only virtio-blk disks, composed with overlayfs inside the guest over a tmpfs upper of
// the sandbox's disk size; the agent protocol runs over a virtio-serial port (frame_relay.h);
// vCPUs and memory come from the spec, the commands' pids and memory limits from a cgroup in
// the guest. QEMU itself runs jailed (qemu_process.h) in the sandbox's cgroup and network
// namespace.
//
// Fast start: per (memory, vCPUs) a template VM is booted once, stopped where its agent
// waits for setup, and saved to a file (QEMU migration). A new sandbox restores that state
// (-incoming) with its own layer files behind the same disk slots, and the agent's setup
// then mounts them, reseeds the guest's randomness and sets its clock. See docs/design.md,
// "microVMs".
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "base/unique_fd.h"
#include "isolation/cgroup.h"
#include "isolation/uid_allocator.h"
#include "runtime/backend.h"
#include "runtime/vm/accel_probe.h"
#include "runtime/vm/guest_image.h"

namespace warren::runtime::vm {

struct MicrovmOptions {
  std::string qemu = "/usr/bin/qemu-system-x86_64";
  std::string kernel;     // a vmlinuz; "" = the newest in /boot
  std::string cache_dir;  // guest images and template snapshots
  std::string agent_path;
  std::string accel;  // "", "auto", "kvm" or "tcg"
  std::string cgroup_parent;
  bool snapshots = true;  // restore from templates; false: every sandbox boots cold
  // Restored microVMs kept waiting per template size in use (network none only): a create
  // hands one its layers instead of starting QEMU. 0: none.
  int warm_pool = 2;
};

struct MicrovmBoot;  // one running QEMU and what it holds (microvm_boot.h)

// A running microVM's memory and device state, captured for a fork (issue 30): the RAM in a
// sealed memfd its children map copy-on-write, as a template's; the state is the rest of
// QEMU's migration stream. Held until the last child has started (a child's mapping keeps
// the pages it reads).
struct MemoryImage {
  UniqueFd ram, state;
  uint64_t ram_mib = 0;
  int vcpus = 1;
  uint64_t ram_bytes = 0;  // what the RAM memfd holds
  int64_t paused_ms = 0;   // how long the parent stood still
  int64_t capture_ms = 0;  // the whole capture
};

class MicrovmBackend : public Backend {
 public:
  // Fails (with the reason) where microVMs cannot run: no QEMU, no guest kernel or modules.
  static Result<std::unique_ptr<MicrovmBackend>> Start(const MicrovmOptions& opts,
                                                       isolation::UidAllocator* uids);
  ~MicrovmBackend() override;

  std::string name() const override { return "microvm"; }
  Result<std::unique_ptr<Instance>> Create(const SandboxConfig& config) override;
  // Takes over a microVM a previous run of this daemon made: its QEMU kept running, and
  // listens for the agent channel and monitor at the same sockets.
  Result<std::unique_ptr<Instance>> Adopt(const std::string& id) override;
  // Whether `id` is a microVM of this node (it has a record in the run directory).
  bool Owns(const std::string& id) const;
  Result<nlohmann::json> ReadRecord(const std::string& id) const;
  nlohmann::json Info() const;
  const AccelChoice& accel() const { return accel_; }
  // What a microVM with nothing running in it uses of the host's CPU: its guest kernel's
  // timers and the agent's channel, emulated. Measured here on 2 vCPUs: 0.02-0.11 CPUs in
  // 1 s samples under TCG; a KVM guest idles at about a tenth of that.
  double QuietCpus() const { return accel_.accel == "kvm" ? 0.03 : 0.15; }

  // A fork of `parent`'s memory: a capture QEMU takes in the parent's RAM by migration while
  // the parent is stopped (`while_stopped` runs then), the parent runs on, and the capture's
  // device state is saved. kUnavailable: this VM cannot be forked so (booted cold, a whole
  // VM); the caller forks its files only.
  Result<std::shared_ptr<MemoryImage>> CaptureFork(Instance& parent,
                                                   const std::function<void()>& while_stopped);
  uint64_t forks() const { return forks_.load(); }

  // The guest RAM a sandbox with `memory_bytes` for its commands gets (kernel, agent, page
  // cache need some on top), in MiB.
  static uint64_t GuestRamMiB(uint64_t memory_bytes);
  // The vCPUs a sandbox asking for `cpus` gets (whole ones, 1 to 16).
  static int GuestVcpus(double cpus);

 private:
  struct Template;
  MicrovmBackend(const MicrovmOptions& opts, isolation::UidAllocator* uids)
      : opts_(opts), uids_(uids) {}
  Result<std::shared_ptr<Template>> TemplateFor(uint64_t ram_mib, int vcpus);
  Status MakeTemplate(Template& t, uint64_t ram_mib, int vcpus);
  Status LoadTemplate(Template& t, uint64_t ram_mib);
  // The warm pool: VMs restored from a template ahead of time, each in its own network
  // namespace (only loopback and an unattached NIC) and a cgroup `warm-*`, its agent waiting
  // for setup. A create of that size with network none takes one: its layers go behind the
  // disk slots through QMP (blockdev-reopen), its cgroup and sockets are renamed after the
  // sandbox, and the setup follows as after any restore. Never reused.
  Result<std::unique_ptr<MicrovmBoot>> MakeWarm(Template& t);
  std::unique_ptr<MicrovmBoot> TakeWarm(Template& t);
  Status HandOver(MicrovmBoot& boot, const SandboxConfig& cfg, const std::vector<int>& layer_fds);
  void FillLoop();
  // How a QEMU starts: booting (anonymous RAM), booting a template (RAM in a memfd it shares
  // with us) or restoring one (that memfd, sealed, mapped copy-on-write, plus the saved
  // device state).
  // kCapture: a fork's capture, a restore's devices whose RAM is shared with us so that the
  // incoming migration fills our memfd.
  enum class Mode { kCold, kTemplate, kRestore, kCapture };
  // full_os: backend vm, a q35 PC with virtio over PCI booting the image's own init.
  // display: QEMU's screen and input devices (backend vm only).
  std::vector<std::string> QemuArgs(uint64_t ram_mib, int vcpus, size_t slots, Mode mode,
                                    bool full_os = false,
                                    std::optional<agent::DisplaySize> display = {}) const;
  // How the node's agent channel starts: a new session (a sync each way), taking over one
  // the guest had (adopt), or none (a capture never runs its guest: nothing may be queued
  // into a port whose state it saves).
  enum class Session { kNew, kAdopt, kNone };
  struct LaunchSpec {
    std::string name, cgroup_name;
    uint64_t ram_mib = 0;
    int vcpus = 1;
    double cpus = 1;
    Mode mode = Mode::kCold;
    bool full_os = false;
    std::vector<int> layer_fds;
    int state_fd = -1, ram_fd = -1, netns_fd = -1;
    bool bridge_eth0 = false;
    std::optional<agent::DisplaySize> display;  // backend vm: QEMU's screen and input devices
    Session session = Session::kNew;
  };
  // A VM of the node's own (template, warm, fork capture): cgroup `name`, its CPUs its
  // vCPUs, every disk slot the placeholder.
  static LaunchSpec PlaceholderLaunch(const std::string& name, uint64_t ram_mib, int vcpus,
                                      Mode mode, int placeholder);
  // The sandbox's layer blobs opened in its order: `fds` to pass, `owned` to close after.
  static Status OpenLayers(const SandboxConfig& cfg, std::vector<UniqueFd>* owned,
                           std::vector<int>* fds);
  Result<std::unique_ptr<MicrovmBoot>> Launch(const LaunchSpec& spec);
  // Connects to a launched (or adopted) QEMU's agent channel and monitor, and starts the relay.
  Status Connect(MicrovmBoot& boot, Session session);
  Result<std::shared_ptr<MemoryImage>> Capture(MicrovmBoot& parent,
                                               const std::function<void()>& while_stopped);
  // A memory fork's child (SandboxConfig::memory): the image restored, then given its own
  // identity (agent::VmRefreshMessage).
  Result<std::unique_ptr<Instance>> CreateFromFork(const SandboxConfig& cfg);
  Status WriteRecord(MicrovmBoot& boot, const SandboxConfig& cfg,
                     const std::optional<agent::DisplaySize>& display);
  std::string RunDir() const;
  isolation::CgroupLimits QemuLimits(uint64_t ram_mib, double cpus, uint64_t video_bytes = 0) const;

  MicrovmOptions opts_;
  isolation::UidAllocator* uids_;
  GuestImage guest_;
  AccelChoice accel_;
  std::string qemu_version_;
  std::string placeholder_;  // a sparse file standing in for layer disks in templates
  // Cache files, held open (a daemon sharing the cache may prune them; see PruneCache).
  UniqueFd placeholder_fd_, kernel_fd_, bzimage_fd_, initrd_fd_;
  uint64_t tsc_khz_ = 0;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Template>> templates_;
  std::condition_variable fill_cv_;  // with mu_: a pool to fill, or stopping_
  bool stopping_ = false;
  std::thread filler_;
  // Figures for /v1/nodes.
  std::atomic<uint64_t> restores_{0}, cold_boots_{0}, full_os_boots_{0}, warm_starts_{0}, forks_{0},
      fork_children_{0};
  std::atomic<int> warm_ready_{0};
};

}  // namespace warren::runtime::vm
