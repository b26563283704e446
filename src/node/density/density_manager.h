// Density: a node holds many more idle sandboxes than their requests add up to, and a busy
// sandbox never pays for it (issue 27).
//
// - Overcommit: Admit lets the sandboxes' requested memory and CPU add up to the node's budget
//   times its ratios; each keeps the limit it asked for.
// - Idle detection (idle_clock.h): API operations and CPU use and memory pressure per sample.
// - Reclaim: an idle sandbox may swap (its swappiness goes up) and its cgroup gives memory
//   back step by step (cgroup_memory.h); a busy one may not, so the kernel's own reclaim at
//   the node budget takes only its page cache.
// - Hibernate: quiet for longer, it is frozen and every page of its processes goes to swap
//   (page_out.h); Touch, called by the node before any operation that reaches it, thaws it,
//   and the caller only sees a slower call.
// - Pressure: when the node's real use (its sandboxes plus the compressed swap) nears the
//   budget, the idlest give back everything first; past the refusal mark, creates are refused;
//   only after that may the kernel choose, and oom_score_adj follows idleness (busy commands
//   0, idle 500-900, hibernated 1000; agents stay at -998).
// - Swap: a zram device or a swap file of the node's own (node_swap.h), the host's swap, or
//   none.
//
// Thread-safe. One pass (Tick) runs on the manager's thread every `tick`; tests drive it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "isolation/cgroup_memory.h"
#include "isolation/node_swap.h"
#include "node/density/density_types.h"
#include "node/density/idle_clock.h"

namespace warren::node::density {

enum class SwapMode { kAuto, kZram, kFile, kHost, kNone };
struct SwapChoice {
  SwapMode mode = SwapMode::kAuto;
  uint64_t bytes = 0;  // zram:SIZE, file:PATH:SIZE; 0: the default
  std::string path;    // file:PATH
};
// "auto", "zram", "zram:SIZE", "file:PATH", "file:PATH:SIZE", "host", "none"; nullopt if
// malformed (a size under 16 MiB, a path not absolute or with white space).
std::optional<SwapChoice> ParseSwapMode(std::string_view s);
std::string_view SwapModeName(SwapMode m);

struct DensityOptions {
  bool enabled = true;  // false: no reclaim or hibernation (admission still counts)
  IdleThresholds idle;
  std::chrono::milliseconds tick{1000};
  // The memory the node's sandboxes may really use; the node's cgroup is limited to it.
  // 0: the host's memory less a reserve for the host (1/8, at least 512 MiB).
  uint64_t memory_budget_bytes = 0;
  bool enforce_budget = false;  // limit the node's cgroup to the budget (set by the flag)
  // How far the sandboxes' requests may exceed the budget (memory) and the host's CPUs; 0:
  // no limit. CPU is time-shared and each sandbox's quota caps its own use, so by default its
  // requests are not limited (1,000 sandboxes asking 1 CPU each on 2 cores is the common
  // case of agents that wait); memory is, as four times the budget.
  double memory_overcommit = 4.0;
  double cpu_overcommit = 0;
  // Real use, as a share of the budget, above which the idlest sandboxes give back everything
  // they can, and above which creates are refused.
  double reclaim_at = 0.85;
  double refuse_at = 0.95;
  SwapMode swap = SwapMode::kAuto;
  uint64_t swap_bytes = 0;  // 0: half the budget for zram, the budget for a file
  std::string swap_file;    // SwapMode::kFile: the file the node creates
  std::string cgroup_parent = "warren";
  std::string state_dir = "/run/warren";  // where the node's swap is named for the next run
};

// What the manager needs of one sandbox.
struct TrackedSandbox {
  std::string id;
  isolation::CgroupPaths paths;
  pid_t protected_pid = 0;  // never ranked for the OOM killer (the container's agent)
  uint64_t memory_bytes = 0;
  double cpus = 0;
  double quiet_cpus = 0;  // runtime::Instance::quiet_cpus
  std::function<Status(bool frozen)> freeze;
  // Whether someone waits on one of its running commands (a blocking exec call, a stream).
  // Such a sandbox may be idle but is never hibernated: a frozen command's timers do not
  // fire, so it could not end and its caller would wait forever. Called with no lock of the
  // manager's held.
  std::function<bool()> awaited;
  bool frozen_now = false;  // adopted frozen by an earlier run: hibernated
};

class DensityManager {
 public:
  static Result<std::unique_ptr<DensityManager>> Start(const DensityOptions& opts);
  ~DensityManager();

  // Whether a sandbox asking for `memory_bytes` and `cpus` may be made now: the requests'
  // sum under the budget times the ratios (kQuota), the node not under pressure after
  // reclaiming from the idle (kUnavailable). Holds the request until Add or Forget(id).
  Status Admit(const std::string& id, uint64_t memory_bytes, double cpus);
  // Starts tracking a sandbox (made, adopted, or claimed from the warm pool).
  void Add(TrackedSandbox s);
  // Stops tracking it and gives its request back (deleted, or its create failed).
  void Forget(const std::string& id);
  // An operation on `id` is about to reach its processes: it is active from now, and a
  // hibernated sandbox is thawed first. Unknown ids are fine (fncall, not tracked).
  Status Touch(const std::string& id);
  // A user's pause or resume: a paused sandbox is never thawed by Touch.
  void SetUserPaused(const std::string& id, bool paused);

  std::optional<SandboxDensity> Sandbox(const std::string& id);
  NodeDensity Node();
  // One pass: sample, move sandboxes between active, idle and hibernated, relieve pressure.
  void Tick(Clock::time_point now);

 private:
  struct Tracked {
    explicit Tracked(TrackedSandbox s, Clock::time_point now) : s(std::move(s)), clock(now) {}
    TrackedSandbox s;
    Mutex op_mu;  // one action at a time: a reclaim, a hibernation, a wake
    IdleClock clock GUARDED_BY(op_mu);
    Activity activity GUARDED_BY(op_mu) = Activity::kActive;
    std::atomic<Activity> shown{Activity::kActive};  // for counts, read without op_mu
    void Set(Activity a) REQUIRES(op_mu) {
      activity = a;
      shown = a;
    }
    bool user_paused GUARDED_BY(op_mu) = false;
    int oom_adj GUARDED_BY(op_mu) = 0;
    // Forgotten (deleted): its instance may be gone, so nothing acts on it any more.
    bool gone GUARDED_BY(op_mu) = false;
    Clock::time_point last_reclaim GUARDED_BY(op_mu);
    uint64_t reclaimed GUARDED_BY(op_mu) = 0;
    uint64_t wakes GUARDED_BY(op_mu) = 0;
    double last_wake_ms GUARDED_BY(op_mu) = 0, max_wake_ms GUARDED_BY(op_mu) = 0;
  };
  explicit DensityManager(const DensityOptions& opts) : opts_(opts) {}
  Status SetUpSwap();
  std::shared_ptr<Tracked> Find(const std::string& id);
  std::vector<std::shared_ptr<Tracked>> All();
  uint64_t NodeUsedBytes();
  // Moves `t` to `want`, doing what that takes. Holds t.op_mu.
  void MoveTo(Tracked& t, Activity want, Clock::time_point now) REQUIRES(t.op_mu);
  void TickOne(Tracked& t, Clock::time_point now, bool awaited) REQUIRES(t.op_mu);
  void Reclaim(Tracked& t, uint64_t target) REQUIRES(t.op_mu);
  void Hibernate(Tracked& t) REQUIRES(t.op_mu);
  Status Wake(Tracked& t) REQUIRES(t.op_mu);
  void RankForOom(Tracked& t, int adj) REQUIRES(t.op_mu);
  // Reclaims from the idlest until real use is under `goal` bytes; how much went.
  uint64_t RelievePressure(uint64_t goal);
  void Loop();

  DensityOptions opts_;
  uint64_t budget_ = 0;
  double host_cpus_ = 1;
  std::unique_ptr<isolation::NodeSwap> swap_;  // the node's own, if it has one
  std::string swap_error_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Tracked>> tracked_ GUARDED_BY(mu_);
  struct Request {
    uint64_t memory_bytes;
    double cpus;
  };
  std::map<std::string, Request> requests_ GUARDED_BY(mu_);  // admitted and tracked
  uint64_t committed_memory_ GUARDED_BY(mu_) = 0;
  double committed_cpus_ GUARDED_BY(mu_) = 0;
  std::deque<double> wake_ms_ GUARDED_BY(mu_);  // the last 1,024 wakes
  uint64_t wakes_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> reclaimed_{0}, pressure_reclaims_{0}, refused_{0};
  Mutex pressure_mu_;  // one pressure relief at a time
  std::thread thread_;
  Mutex stop_mu_;
  std::condition_variable_any stop_cv_;
  bool stop_ GUARDED_BY(stop_mu_) = false;
};

}  // namespace warren::node::density
