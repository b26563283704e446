#include "node/density/density_manager.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

#include "base/size.h"
#include "isolation/oom_priority.h"
#include "isolation/page_out.h"
#include "isolation/swap_file.h"
#include "isolation/zram_swap.h"

namespace warren::node::density {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr size_t kWakeSamples = 1024;
// What idle reclaim leaves a sandbox at least. Below it goes its working set (a microVM's
// guest kernel and agent, about 4 MiB here; an agent's event loop), which it faults straight
// back in: a microVM under TCG then spent 0.27 CPUs every few seconds on it, which is both
// waste and indistinguishable from activity. Hibernation, which freezes it first, takes the
// rest; so does pressure.
constexpr uint64_t kIdleReclaimFloor = 16 * kMiB;
// Scores for the OOM killer (see the header): a command of an idle sandbox 500 and up by its
// quiet minutes, of a hibernated one 1000.
constexpr int kIdleOomAdj = 500, kIdleOomAdjMax = 900, kHibernatedOomAdj = 1000;

uint64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : 0;
}

// The density thread's reclaim, page-out and swap compression run on its own CPU time (the
// kernel reclaims in the writer's context), on a node whose busy sandboxes may want every CPU:
// it runs at nice 19, so that a busy sandbox does not pay for the idle ones' reclaim, except
// while relieving pressure, which is more urgent than anyone's throughput.
constexpr int kBackgroundNice = 19;

void SetThreadNice(int nice) { (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice); }

int ThreadNice() {
  errno = 0;
  const int n = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  return errno == 0 ? n : 0;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

int IdleOomAdj(Clock::duration quiet) {
  const auto minutes = std::chrono::duration_cast<std::chrono::minutes>(quiet).count();
  return static_cast<int>(std::min<int64_t>(kIdleOomAdjMax, kIdleOomAdj + 40 * minutes));
}

}  // namespace

std::optional<SwapChoice> ParseSwapMode(std::string_view s) {
  auto size = [](std::string_view v) -> std::optional<uint64_t> {
    auto n = ParseSize(v);
    if (!n || *n < 16 * kMiB) return std::nullopt;
    return n;
  };
  if (s == "auto") return SwapChoice{SwapMode::kAuto};
  if (s == "host") return SwapChoice{SwapMode::kHost};
  if (s == "none") return SwapChoice{SwapMode::kNone};
  if (s == "zram") return SwapChoice{SwapMode::kZram};
  if (s.starts_with("zram:")) {
    auto n = size(s.substr(5));
    if (!n) return std::nullopt;
    return SwapChoice{SwapMode::kZram, *n};
  }
  if (s.starts_with("file:")) {
    SwapChoice c{SwapMode::kFile};
    std::string_view path = s.substr(5);
    // file:PATH:SIZE when what follows the last colon is a size.
    if (auto colon = path.rfind(':'); colon != std::string_view::npos) {
      auto n = size(path.substr(colon + 1));
      if (!n) return std::nullopt;
      c.bytes = *n;
      path = path.substr(0, colon);
    }
    if (!path.starts_with('/') || path.size() < 2 ||
        path.find_first_of(" \t\n\\") != std::string_view::npos)
      return std::nullopt;
    c.path = std::string(path);
    return c;
  }
  return std::nullopt;
}

std::string_view SwapModeName(SwapMode m) {
  switch (m) {
    case SwapMode::kAuto:
      return "auto";
    case SwapMode::kZram:
      return "zram";
    case SwapMode::kFile:
      return "file";
    case SwapMode::kHost:
      return "host";
    case SwapMode::kNone:
      return "none";
  }
  return "none";
}

Result<std::unique_ptr<DensityManager>> DensityManager::Start(const DensityOptions& opts) {
  for (double r : {opts.memory_overcommit, opts.cpu_overcommit})
    if (r != 0 && r < 1)
      return Invalid("density", "overcommit ratios are 0 (no limit) or 1 or more");
  if (!(opts.reclaim_at > 0 && opts.reclaim_at <= opts.refuse_at && opts.refuse_at <= 1))
    return Invalid("density", "0 < reclaim mark <= refusal mark <= 1");
  std::unique_ptr<DensityManager> m(new DensityManager(opts));
  const uint64_t host = HostMemoryBytes();
  m->budget_ = opts.memory_budget_bytes
                   ? opts.memory_budget_bytes
                   : host - std::min(host, std::max<uint64_t>(512 * kMiB, host / 8));
  m->host_cpus_ = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  if (opts.enforce_budget)
    WARREN_RETURN_IF_ERROR(isolation::SetParentMemoryLimit(opts.cgroup_parent, m->budget_)
                               .Context("limit the node's cgroup to its memory budget"));
  if (opts.enabled) {
    Status st = m->SetUpSwap();
    if (!st.ok()) {
      // Reclaim still drops page cache without swap; the reason is in /v1/nodes.
      m->swap_error_ = st.ToString();
      spdlog::warn("density: no swap device: {}", m->swap_error_);
    }
    m->thread_ = std::thread([p = m.get()] { p->Loop(); });
  }
  return m;
}

Status DensityManager::SetUpSwap() {
  const std::string state = opts_.state_dir + "/" + opts_.cgroup_parent + ".swap";
  if (opts_.swap == SwapMode::kNone) return Status::Ok();
  // An earlier run's swap holds the pages of the sandboxes that survived it, whatever kind
  // this run was asked for.
  if (auto adopted = isolation::AdoptNodeSwap(state); adopted.ok()) {
    swap_ = std::move(*adopted);
    spdlog::info("density: swap on {} (adopted)", swap_->device());
    return Status::Ok();
  }
  if (opts_.swap == SwapMode::kHost ||
      (opts_.swap == SwapMode::kAuto && isolation::HostSwapStats().size_bytes > 0)) {
    if (isolation::HostSwapStats().size_bytes == 0)
      return Status(Code::kUnavailable, "use host swap", "node", "the host has no swap on");
    return Status::Ok();
  }
  (void)mkdir(opts_.state_dir.c_str(), 0755);
  if (opts_.swap == SwapMode::kFile) {
    const uint64_t bytes = opts_.swap_bytes ? opts_.swap_bytes : budget_;
    swap_ = WARREN_TRY(isolation::SwapFile::Create(opts_.swap_file, bytes, state));
    spdlog::info("density: swap on {} ({} MiB)", swap_->device(), bytes / kMiB);
    return Status::Ok();
  }
  const uint64_t bytes = opts_.swap_bytes ? opts_.swap_bytes : budget_ / 2;
  swap_ = WARREN_TRY(isolation::ZramSwap::Create(bytes, state));
  spdlog::info("density: swap on {} ({} MiB, compressed)", swap_->device(), bytes / kMiB);
  return Status::Ok();
}

DensityManager::~DensityManager() {
  {
    MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Sandboxes that outlive this run (they survive a restart in place) may have pages in the
  // swap: it stays on for the next run to adopt. Without any, it goes, even with pages in it:
  // swap is the host's, and other processes' pages land in it too (swapoff brings them back).
  bool survivors;
  {
    MutexLock lock(&mu_);
    survivors = !tracked_.empty();
  }
  if (swap_ && survivors) {
    swap_->Detach();
  } else if (swap_) {
    if (Status st = swap_->Release(); !st.ok()) spdlog::warn("density: {}", st.ToString());
  }
  if (opts_.enforce_budget) (void)isolation::SetParentMemoryLimit(opts_.cgroup_parent, 0);
}

void DensityManager::Loop() {
  SetThreadNice(kBackgroundNice);
  for (;;) {
    {
      MutexLock lock(&stop_mu_);
      lock.WaitFor(stop_cv_, opts_.tick, [this]() NO_THREAD_SAFETY_ANALYSIS { return stop_; });
      if (stop_) return;
    }
    Tick(Clock::now());
  }
}

Status DensityManager::Admit(const std::string& id, uint64_t memory_bytes, double cpus) {
  {
    MutexLock lock(&mu_);
    const double mem_limit = static_cast<double>(budget_) * opts_.memory_overcommit;
    if (mem_limit > 0 && static_cast<double>(committed_memory_ + memory_bytes) > mem_limit) {
      ++refused_;
      return Status(Code::kQuota, "create sandbox", id,
                    "the node's memory is committed: " + std::to_string(committed_memory_ / kMiB) +
                        " MiB of " + std::to_string(static_cast<uint64_t>(mem_limit) / kMiB) +
                        " MiB requested (budget times overcommit " +
                        std::to_string(opts_.memory_overcommit).substr(0, 4) + ")");
    }
    const double cpu_limit = host_cpus_ * opts_.cpu_overcommit;
    if (cpu_limit > 0 && committed_cpus_ + cpus > cpu_limit + 1e-9) {
      ++refused_;
      return Status(Code::kQuota, "create sandbox", id,
                    "the node's CPUs are committed: " + std::to_string(committed_cpus_) + " of " +
                        std::to_string(cpu_limit) + " requested");
    }
    requests_[id] = {memory_bytes, cpus};
    committed_memory_ += memory_bytes;
    committed_cpus_ += cpus;
  }
  if (!opts_.enabled) return Status::Ok();
  const double refuse = static_cast<double>(budget_) * opts_.refuse_at;
  if (static_cast<double>(NodeUsedBytes()) > refuse) {
    (void)RelievePressure(static_cast<uint64_t>(static_cast<double>(budget_) * opts_.reclaim_at));
    if (const uint64_t used = NodeUsedBytes(); static_cast<double>(used) > refuse) {
      Forget(id);
      ++refused_;
      return Status(Code::kUnavailable, "create sandbox", id,
                    "the node is short of memory (" + std::to_string(used / kMiB) + " of " +
                        std::to_string(budget_ / kMiB) +
                        " MiB in use after reclaiming from idle sandboxes); retry later");
    }
  }
  return Status::Ok();
}

void DensityManager::Add(TrackedSandbox s) {
  const auto now = Clock::now();
  const bool frozen = s.frozen_now;
  auto t = std::make_shared<Tracked>(std::move(s), now);
  {
    MutexLock op(&t->op_mu);
    t->last_reclaim = now;
    // An earlier run hibernated it: it wakes on its first operation.
    if (frozen) t->Set(Activity::kHibernated);
  }
  MutexLock lock(&mu_);
  if (!requests_.count(t->s.id)) {
    requests_[t->s.id] = {t->s.memory_bytes, t->s.cpus};
    committed_memory_ += t->s.memory_bytes;
    committed_cpus_ += t->s.cpus;
  }
  tracked_[t->s.id] = std::move(t);
}

void DensityManager::Forget(const std::string& id) {
  std::shared_ptr<Tracked> t;
  {
    MutexLock lock(&mu_);
    if (auto it = tracked_.find(id); it != tracked_.end()) {
      t = std::move(it->second);
      tracked_.erase(it);
    }
    if (auto it = requests_.find(id); it != requests_.end()) {
      committed_memory_ -= std::min(committed_memory_, it->second.memory_bytes);
      committed_cpus_ = std::max(0.0, committed_cpus_ - it->second.cpus);
      requests_.erase(it);
    }
  }
  // Waits out an action under way (a pass that listed it before it was erased): the caller
  // destroys the sandbox next, and no action may reach its instance after that.
  if (t) {
    MutexLock op(&t->op_mu);
    t->gone = true;
  }
}

std::shared_ptr<DensityManager::Tracked> DensityManager::Find(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = tracked_.find(id);
  return it == tracked_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<DensityManager::Tracked>> DensityManager::All() {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Tracked>> out;
  out.reserve(tracked_.size());
  for (auto& [id, t] : tracked_) out.push_back(t);
  return out;
}

Status DensityManager::Touch(const std::string& id) {
  auto t = Find(id);
  if (!t) return Status::Ok();
  const auto start = Clock::now();
  MutexLock op(&t->op_mu);  // waits out a hibernation under way
  if (t->gone) return Status::Ok();
  t->clock.Touch(Clock::now());
  if (t->activity == Activity::kActive) return Status::Ok();
  const bool was_hibernated = t->activity == Activity::kHibernated;
  if (was_hibernated && t->user_paused) return Status::Ok();  // the user's pause holds
  WARREN_RETURN_IF_ERROR(Wake(*t).Context("wake " + id));
  if (was_hibernated) {
    const double ms = Ms(Clock::now() - start);
    ++t->wakes;
    t->last_wake_ms = ms;
    t->max_wake_ms = std::max(t->max_wake_ms, ms);
    MutexLock lock(&mu_);
    ++wakes_;
    wake_ms_.push_back(ms);
    if (wake_ms_.size() > kWakeSamples) wake_ms_.pop_front();
  }
  return Status::Ok();
}

void DensityManager::SetUserPaused(const std::string& id, bool paused) {
  auto t = Find(id);
  if (!t) return;
  MutexLock op(&t->op_mu);
  if (t->gone) return;
  t->user_paused = paused;
  // Resumed by its user: thawed by the node already; it is active again.
  if (!paused) {
    t->clock.Touch(Clock::now());
    if (t->activity != Activity::kActive) (void)Wake(*t);
  }
}

Status DensityManager::Wake(Tracked& t) {
  if (t.activity == Activity::kHibernated && t.s.freeze) WARREN_RETURN_IF_ERROR(t.s.freeze(false));
  t.Set(Activity::kActive);
  // Busy again: its working set stays in RAM. Pages in swap come back as it touches them.
  if (Status st = isolation::SetSwapAllowed(t.s.paths, false); !st.ok())
    spdlog::debug("density: {}: {}", t.s.id, st.ToString());
  RankForOom(t, 0);
  return Status::Ok();
}

void DensityManager::RankForOom(Tracked& t, int adj) {
  if (t.oom_adj == adj) return;
  for (pid_t pid : isolation::ListPids(t.s.paths))
    if (pid != t.s.protected_pid) (void)isolation::SetOomScoreAdj(pid, adj);
  t.oom_adj = adj;
}

void DensityManager::Reclaim(Tracked& t, uint64_t target) {
  auto r = isolation::ReclaimTo(t.s.paths, target);
  if (!r.ok()) {
    spdlog::debug("density: reclaim {}: {}", t.s.id, r.status().ToString());
    return;
  }
  const uint64_t gone = r->before_bytes > r->after_bytes ? r->before_bytes - r->after_bytes : 0;
  t.reclaimed += gone;
  reclaimed_ += gone;
}

void DensityManager::Hibernate(Tracked& t) {
  if (!t.user_paused && t.s.freeze) {
    if (Status st = t.s.freeze(true); !st.ok()) {
      spdlog::warn("density: hibernate {}: {}", t.s.id, st.ToString());
      return;  // stays idle; tried again next pass
    }
  }
  t.Set(Activity::kHibernated);
  (void)isolation::SetSwapAllowed(t.s.paths, true);
  for (pid_t pid : isolation::ListPids(t.s.paths)) (void)isolation::PageOutProcess(pid);
  Reclaim(t, 0);  // its page cache, and what page-out left
  RankForOom(t, kHibernatedOomAdj);
}

void DensityManager::MoveTo(Tracked& t, Activity want, Clock::time_point now) {
  if (want == Activity::kActive) {
    // Busy by its CPU or pressure (an operation would have woken it already).
    if (t.activity == Activity::kIdle) (void)Wake(t);
    return;
  }
  if (want == Activity::kHibernated) {
    if (t.activity != Activity::kHibernated) Hibernate(t);
    return;
  }
  // Idle: it may swap, and gives back half of what it holds each idle period, down to the
  // floor (kIdleReclaimFloor).
  if (t.activity == Activity::kActive) {
    t.Set(Activity::kIdle);
    (void)isolation::SetSwapAllowed(t.s.paths, true);
    t.last_reclaim = Clock::time_point{};
  }
  if (now - t.last_reclaim >= opts_.idle.idle_after) {
    if (auto use = isolation::ReadMemoryUse(t.s.paths);
        use.ok() && use->resident_bytes > kIdleReclaimFloor)
      Reclaim(t, std::max(use->resident_bytes / 2, kIdleReclaimFloor));
    t.last_reclaim = now;
  }
  RankForOom(t, IdleOomAdj(t.clock.QuietFor(now)));
}

uint64_t DensityManager::NodeUsedBytes() {
  // Two counters only: this runs at every create (Admit).
  auto parent = isolation::ReadParentResidentBytes(opts_.cgroup_parent);
  return (parent.ok() ? *parent : 0) + (swap_ ? swap_->RamBytes() : 0);
}

uint64_t DensityManager::RelievePressure(uint64_t goal) {
  MutexLock relief(&pressure_mu_);
  uint64_t used = NodeUsedBytes();
  if (used <= goal) return 0;
  const uint64_t start = used;
  ++pressure_reclaims_;
  const int nice = ThreadNice();
  if (nice > 0) SetThreadNice(0);
  // The idlest first; never a busy one (the kernel takes only its page cache, at the budget).
  struct Candidate {
    Clock::duration quiet;
    std::shared_ptr<Tracked> t;
  };
  std::vector<Candidate> order;
  const auto now = Clock::now();
  for (auto& t : All()) {
    if (!t->op_mu.try_lock()) continue;  // being woken or hibernated right now
    const bool quiet = t->activity != Activity::kActive && !t->gone;
    const auto q = t->clock.QuietFor(now);
    t->op_mu.unlock();
    if (quiet) order.push_back({q, t});
  }
  std::sort(order.begin(), order.end(),
            [](const Candidate& a, const Candidate& b) { return a.quiet > b.quiet; });
  for (auto& c : order) {
    {
      MutexLock op(&c.t->op_mu);
      if (c.t->activity == Activity::kActive || c.t->gone) continue;  // woken or deleted
      Reclaim(*c.t, 0);
    }
    used = NodeUsedBytes();
    if (used <= goal) break;
  }
  if (nice > 0) SetThreadNice(nice);
  return start > used ? start - used : 0;
}

void DensityManager::TickOne(Tracked& t, Clock::time_point now, bool awaited) {
  if (t.gone) return;
  if (t.activity != Activity::kHibernated) {
    if (auto cpu = isolation::ReadCpuUsec(t.s.paths); cpu.ok())
      t.clock.Sample(now, *cpu, isolation::ReadMemoryPressure(t.s.paths), opts_.idle,
                     t.s.quiet_cpus);
  }
  Activity want = t.clock.Want(now, opts_.idle);
  if (awaited) {
    // Hibernated in a gap between a waiter's wake-up and its next wait (a stream re-polls
    // after each chunk): thawed, or its command could not end.
    if (t.activity == Activity::kHibernated && !t.user_paused) (void)Wake(t);
    if (want == Activity::kHibernated) want = Activity::kIdle;
  }
  // A paused sandbox stays as its user left it, but may still be paged out.
  if (t.user_paused && want != Activity::kHibernated) return;
  MoveTo(t, want, now);
}

void DensityManager::Tick(Clock::time_point now) {
  for (auto& t : All()) {
    // Asked before taking op_mu: the node answers under its own locks, which it may hold
    // while it calls Forget (which waits for op_mu).
    const bool awaited = t->s.awaited && t->s.awaited();
    if (!t->op_mu.try_lock()) continue;  // being woken or hibernated: next pass
    TickOne(*t, now, awaited);
    t->op_mu.unlock();
  }
  const double budget = static_cast<double>(budget_);
  if (static_cast<double>(NodeUsedBytes()) > budget * opts_.reclaim_at)
    (void)RelievePressure(static_cast<uint64_t>(budget * (opts_.reclaim_at - 0.05)));
}

std::optional<SandboxDensity> DensityManager::Sandbox(const std::string& id) {
  auto t = Find(id);
  if (!t) return std::nullopt;
  SandboxDensity d;
  {
    MutexLock op(&t->op_mu);
    d.activity = t->activity;
    d.user_paused = t->user_paused;
    d.quiet_s = std::chrono::duration<double>(t->clock.QuietFor(Clock::now())).count();
    d.cpus = t->clock.cpus();
    d.reclaimed_bytes = t->reclaimed;
    d.wakes = t->wakes;
    d.last_wake_ms = t->last_wake_ms;
    d.max_wake_ms = t->max_wake_ms;
  }
  if (auto m = isolation::ReadMemoryUse(t->s.paths); m.ok()) d.memory = *m;
  return d;
}

NodeDensity DensityManager::Node() {
  NodeDensity n;
  n.enabled = opts_.enabled;
  n.budget_bytes = budget_;
  n.memory_overcommit = opts_.memory_overcommit;
  n.cpu_overcommit = opts_.cpu_overcommit;
  n.host_cpus = host_cpus_;
  n.used_bytes = NodeUsedBytes();
  n.reclaimed_bytes = reclaimed_;
  n.pressure_reclaims = pressure_reclaims_;
  n.refused_creates = refused_;
  n.swap_mode = std::string(SwapModeName(opts_.swap));
  n.swap_error = swap_error_;
  if (swap_) {
    n.swap_device = swap_->device();
    n.swap = swap_->Stats();
  } else if (opts_.swap != SwapMode::kNone) {
    n.swap = isolation::HostSwapStats();
  }
  for (const char* a : {"active", "idle", "hibernated"}) n.sandboxes[a] = 0;
  std::vector<double> wakes;
  std::vector<std::shared_ptr<Tracked>> all;
  {
    MutexLock lock(&mu_);
    n.committed_memory_bytes = committed_memory_;
    n.committed_cpus = committed_cpus_;
    n.wakes = wakes_;
    wakes.assign(wake_ms_.begin(), wake_ms_.end());
    for (auto& [id, t] : tracked_) all.push_back(t);
  }
  for (auto& t : all) ++n.sandboxes[std::string(ActivityName(t->shown.load()))];
  n.wake_p50_ms = Percentile(wakes, 0.50);
  n.wake_p99_ms = Percentile(wakes, 0.99);
  n.wake_max_ms = wakes.empty() ? 0 : *std::max_element(wakes.begin(), wakes.end());
  return n;
}

}  // namespace warren::node::density
