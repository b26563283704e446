// What the microVM backend's files share (microvm_backend.cc, microvm_fork.cc): the fixed
// fd layout inside QEMU, one running QEMU and what it holds (MicrovmBoot), the sandbox it
// becomes (MicrovmInstance), and the small helpers both need.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "agent/protocol.h"
#include "agent/setup_messages.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "isolation/cgroup.h"
#include "isolation/uid_allocator.h"
#include "runtime/backend.h"
#include "runtime/vm/qemu_process.h"
#include "runtime/vm/qmp_client.h"
#include "runtime/vm/qmp_screen.h"

namespace warren::runtime::vm {

// Disk slots every microVM has, so that a template's devices match any sandbox's: unused
// slots point at the placeholder. A sandbox with more layers boots cold.
inline constexpr size_t kLayerSlots = 8;
// Fixed fd numbers inside QEMU (see QemuArgs).
inline constexpr int kAgentFd = 3, kQmpFd = 4, kKernelFd = 5, kInitrdFd = 6, kStateFd = 7,
                     kRamFd = 8, kTapFd = 9, kFirstLayerFd = 10;
// Every VM's NIC has this MAC in QEMU's arguments (a template's arguments must match its
// restores'); the guest agent then sets the sandbox's own (GuestMac).
inline constexpr const char* kTemplateMac = "52:54:00:00:00:01";
inline constexpr int kColdBootTimeoutMs = 180000;  // TCG on a busy 2-core host
inline constexpr int kSetupTimeoutMs = 60000;
inline constexpr int64_t kTemplateRetryMs = 60000;
inline constexpr int64_t kWarmIdleMs = 600000;  // warm VMs of a size not asked for in this long go
inline constexpr size_t kConsoleTail = 8192;

int64_t NowMs();
// A new open file description (offset 0) of a held file, through /proc/self/fd.
Result<UniqueFd> Reopen(const UniqueFd& held, const std::string& what);
// Waits for the next agent message on `sock`, giving up if QEMU exits first.
Result<agent::Message> WaitMessage(int sock, int qemu_pidfd, int timeout_ms);
// Loads saved device state (fd kStateFd, RAM skipped: it is mapped already) and runs the
// guest.
Status Restore(QmpClient& q);
std::string Ip4(uint32_t be);
// The VM's own MAC, locally administered and unique on the node's bridge (from its address).
std::string GuestMac(uint32_t be_ip);
std::string HexRandom(size_t n);
// Guest RAM in a memfd QEMU shares with us; sealed, it can only be mapped copy-on-write.
Result<UniqueFd> NewRamMemfd(uint64_t ram_mib, const char* name = "warren-template-ram");
Status SealRam(int fd, const char* what = "template RAM");
// Waits for an outgoing migration on `q` to complete.
Status AwaitMigration(QmpClient& q, int timeout_ms, const std::string& what);
// Waits for `q`'s guest to reach run state `want` from "inmigrate" (an incoming migration).
Status AwaitIncoming(QmpClient& q, const std::string& want, int timeout_ms,
                     const std::string& what);

// One running QEMU and what it holds. Destroying it kills QEMU and releases everything.
struct MicrovmBoot {
  isolation::UidSlot slot;
  isolation::Cgroup cgroup;
  QemuProcess qemu;
  std::unique_ptr<QmpClient> qmp;
  UniqueFd control;  // the node's end of the agent's packet socket
  UniqueFd stop;     // eventfd ending the relay
  std::thread relay;
  std::mutex console_mu;
  std::string console;  // the guest console's last kConsoleTail bytes
  uint64_t ram_mib = 0;
  int vcpus = 1;
  // Its RAM is a memory backend (a restore): it can be migrated into a fork's capture. A
  // cold boot's anonymous RAM cannot be shared with one.
  bool memory_backend = false;
  UniqueFd idle_agent;   // Session::kNone: the agent channel, connected and never used
  std::string run_base;  // RUN_DIR/<name>: .agent and .qmp sockets QEMU listens on
  std::string record;    // RUN_DIR/<id>.vm.json, once the sandbox is running

  std::string ConsoleTail() {
    std::lock_guard lock(console_mu);
    return console;
  }
  // The agent's next message, of type `type` ("" any); failures name `what` and quote the
  // console.
  Result<agent::Message> Await(const std::string& type, int timeout_ms, const std::string& what) {
    auto m = WaitMessage(control.get(), qemu.pidfd.get(), timeout_ms);
    if (!m.ok()) return m.status().Context(what + " (console: " + ConsoleTail() + ")");
    const std::string t = m->header.value("t", "");
    if (!type.empty() && t != type)
      return Internal(what, "microvm", "unexpected agent message " + t);
    return m;
  }
  void Shutdown() {
    KillQemu(qemu);
    if (stop) {
      uint64_t one = 1;
      (void)!write(stop.get(), &one, sizeof one);
    }
    if (relay.joinable()) relay.join();
    (void)cgroup.Destroy();
    if (!run_base.empty()) {
      unlink((run_base + ".agent").c_str());
      unlink((run_base + ".qmp").c_str());
    }
    if (!record.empty()) unlink(record.c_str());
  }
  ~MicrovmBoot() { Shutdown(); }
};

// The screen a VM's record names (written at create, read when a restarted node adopts it).
std::optional<agent::DisplaySize> RecordDisplay(const nlohmann::json& rec);

class MicrovmInstance : public Instance {
 public:
  MicrovmInstance(std::unique_ptr<MicrovmBoot> boot, int pid, uint32_t uid, UniqueFd control,
                  std::function<Status(bool)> freeze, double quiet_cpus,
                  std::optional<agent::DisplaySize> display)
      : boot_(std::move(boot)),
        pid_(pid),
        uid_(uid),
        control_(std::move(control)),
        freeze_(std::move(freeze)),
        quiet_cpus_(quiet_cpus) {
    if (display) screen_.emplace(*display);
  }
  UniqueFd TakeControlSocket() override { return std::move(control_); }
  Status Destroy() override {
    std::lock_guard lock(mu_);
    boot_.reset();
    return Status::Ok();
  }
  // Runs `fn` on the running QEMU, ordered against Destroy and screen calls.
  Status WithBoot(const std::function<Status(MicrovmBoot&)>& fn) {
    std::lock_guard lock(mu_);
    if (!boot_) return Status(Code::kNotFound, "microvm", "sandbox", "gone");
    return fn(*boot_);
  }
  Status Pause() override { return freeze_(true); }
  Status Resume() override { return freeze_(false); }
  isolation::CgroupPaths cgroup_paths() const override {
    std::lock_guard lock(mu_);
    return boot_ ? boot_->cgroup.paths() : isolation::CgroupPaths{};
  }
  double quiet_cpus() const override { return quiet_cpus_; }
  bool has_machine_screen() const override { return screen_.has_value(); }
  Result<std::string> MachineScreenshot() override {
    std::lock_guard lock(mu_);
    if (!screen_) return Instance::MachineScreenshot();
    if (!boot_ || !boot_->qmp) return Status(Code::kNotFound, "take a screenshot", "vm", "gone");
    return screen_->Screenshot(*boot_->qmp);
  }
  Status MachineInput(const std::vector<agent::InputStep>& steps) override {
    if (!screen_) return Instance::MachineInput(steps);
    std::vector<QmpScreen::Batch> plan;
    {
      std::lock_guard lock(mu_);
      plan = WARREN_TRY(screen_->Plan(steps));
    }
    // The lock is taken per batch and never over a wait: a delete or pause goes between.
    for (const auto& b : plan) {
      if (b.events.is_null()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(b.wait_ms));
        continue;
      }
      std::lock_guard lock(mu_);
      if (!boot_ || !boot_->qmp) return Status(Code::kNotFound, "send input", "vm", "gone");
      WARREN_RETURN_IF_ERROR(QmpScreen::Send(*boot_->qmp, b));
    }
    return Status::Ok();
  }
  int host_pid() const override { return pid_; }
  uint32_t host_uid() const override { return uid_; }

 private:
  mutable std::mutex mu_;
  std::unique_ptr<MicrovmBoot> boot_;
  int pid_;
  uint32_t uid_;
  UniqueFd control_;
  std::function<Status(bool)> freeze_;
  double quiet_cpus_;
  std::optional<QmpScreen> screen_;  // backend vm with a display; used under mu_
};

}  // namespace warren::runtime::vm
