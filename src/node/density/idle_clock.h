// When a sandbox was last busy, from what the node sees of it: its API operations (an exec, a
// file call, a stream: Touch) and its CPU use between samples (Sample). What it should be
// now follows from how long it has been quiet: active, idle (its memory is reclaimed), or
// hibernated (frozen and paged out). Pure and clock-driven, so every rule is unit-tested.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace warren::node::density {

using Clock = std::chrono::steady_clock;

enum class Activity { kActive, kIdle, kHibernated };
std::string_view ActivityName(Activity a);

struct IdleThresholds {
  // Quiet this long (no operation, CPU below busy_cpus): idle, its memory reclaimed.
  std::chrono::milliseconds idle_after{std::chrono::seconds(30)};
  // Quiet this long: hibernated. 0: never.
  std::chrono::milliseconds hibernate_after{std::chrono::minutes(5)};
  // CPU use between two samples, in CPUs, above which the sandbox is busy (a command that
  // computes, a server that answers); below it, a process that waits or polls now and then.
  double busy_cpus = 0.02;
  // Memory pressure (PSI "some avg10", percent) above which an active sandbox stays active:
  // it is stalling on its memory, which reclaim would only make worse. An idle one's stalls
  // are what reclaim costs it (pages coming back from swap), not demand: they do not wake it.
  double busy_pressure = 5.0;
};

class IdleClock {
 public:
  explicit IdleClock(Clock::time_point now) : last_busy_(now), last_sample_(now) {}

  // An operation on the sandbox now.
  void Touch(Clock::time_point now) { last_busy_ = std::max(last_busy_, now); }
  // Its CPU counter (microseconds, cumulative) and memory pressure now. The first sample
  // only sets the baseline. `quiet_cpus`: what the sandbox uses with nothing running in it
  // (a VM's emulator), above which `t.busy_cpus` counts.
  void Sample(Clock::time_point now, uint64_t cpu_usec, double pressure, const IdleThresholds& t,
              double quiet_cpus = 0);
  // How long it has been quiet.
  Clock::duration QuietFor(Clock::time_point now) const;
  // What it should be after that long.
  Activity Want(Clock::time_point now, const IdleThresholds& t) const;
  // The CPUs it used between the last two samples.
  double cpus() const { return cpus_; }

 private:
  Clock::time_point last_busy_;
  Clock::time_point last_sample_;
  uint64_t last_cpu_usec_ = 0;
  bool sampled_ = false;
  double cpus_ = 0;
};

}  // namespace warren::node::density
