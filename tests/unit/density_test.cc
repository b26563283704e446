// Density's pure parts: when a sandbox counts as idle or hibernated, and what the node admits.
#include <gtest/gtest.h>

#include <atomic>

#include "node/density/density_manager.h"
#include "node/density/density_types.h"
#include "node/density/idle_clock.h"

namespace warren::node::density {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

IdleThresholds Thresholds() {
  IdleThresholds t;
  t.idle_after = seconds(30);
  t.hibernate_after = seconds(300);
  t.busy_cpus = 0.02;
  t.busy_pressure = 5;
  return t;
}

TEST(IdleClockTest, QuietSandboxGoesIdleThenHibernates) {
  const auto t0 = Clock::now();
  IdleClock c(t0);
  const auto t = Thresholds();
  EXPECT_EQ(c.Want(t0, t), Activity::kActive);
  EXPECT_EQ(c.Want(t0 + seconds(29), t), Activity::kActive);
  EXPECT_EQ(c.Want(t0 + seconds(30), t), Activity::kIdle);
  EXPECT_EQ(c.Want(t0 + seconds(299), t), Activity::kIdle);
  EXPECT_EQ(c.Want(t0 + seconds(300), t), Activity::kHibernated);
}

TEST(IdleClockTest, AnOperationMakesItActiveAgain) {
  const auto t0 = Clock::now();
  IdleClock c(t0);
  const auto t = Thresholds();
  c.Touch(t0 + seconds(400));
  EXPECT_EQ(c.Want(t0 + seconds(401), t), Activity::kActive);
  EXPECT_EQ(c.Want(t0 + seconds(430), t), Activity::kIdle);
  // An older touch (a slow call that started earlier) does not move it back.
  c.Touch(t0 + seconds(100));
  EXPECT_EQ(c.Want(t0 + seconds(430), t), Activity::kIdle);
}

TEST(IdleClockTest, CpuUseAboveTheMarkIsBusyAndBelowItIsNot) {
  const auto t0 = Clock::now();
  IdleClock c(t0);
  const auto t = Thresholds();
  c.Sample(t0, 1'000'000, 0, t);  // baseline only
  // 10 ms of CPU in 10 s: 0.001 CPUs, a process that polls now and then.
  c.Sample(t0 + seconds(40), 1'010'000, 0, t);
  EXPECT_NEAR(c.cpus(), 0.00025, 1e-6);
  EXPECT_EQ(c.Want(t0 + seconds(40), t), Activity::kIdle);
  // Half a CPU for 10 s: a command computing.
  c.Sample(t0 + seconds(50), 6'010'000, 0, t);
  EXPECT_NEAR(c.cpus(), 0.5, 1e-6);
  EXPECT_EQ(c.Want(t0 + seconds(51), t), Activity::kActive);
}

// A VM's emulator uses some CPU with nothing running in the guest: only use above that is busy.
TEST(IdleClockTest, AnInstancesOwnQuietUseIsNotBusy) {
  IdleThresholds t;
  t.idle_after = seconds(30);
  const auto t0 = Clock::time_point{};
  IdleClock c(t0);
  c.Sample(t0, 0, 0, t, 0.15);
  c.Sample(t0 + seconds(40), 4'000'000, 0, t, 0.15);  // 0.1 CPUs: the emulator alone
  EXPECT_EQ(c.Want(t0 + seconds(40), t), Activity::kIdle);
  c.Sample(t0 + seconds(50), 14'000'000, 0, t, 0.15);  // 1 CPU: the guest computes
  EXPECT_EQ(c.Want(t0 + seconds(50), t), Activity::kActive);
}

// An active sandbox stalling on memory stays active: reclaiming from it would make it worse.
TEST(IdleClockTest, MemoryPressureKeepsAnActiveSandboxActive) {
  const auto t0 = Clock::now();
  IdleClock c(t0);
  const auto t = Thresholds();
  c.Sample(t0, 0, 0, t);
  for (int s = 1; s <= 60; s++)
    c.Sample(t0 + seconds(s), 0, 12.5, t);  // stalled on memory a tenth of the time
  EXPECT_EQ(c.Want(t0 + seconds(61), t), Activity::kActive);
}

// Once idle, its stalls are what reclaim costs it (a page it touches comes back from swap),
// not demand: they do not wake it, or reclaim and waking would take turns forever.
TEST(IdleClockTest, StallsOfAnIdleSandboxDoNotWakeIt) {
  const auto t0 = Clock::now();
  IdleClock c(t0);
  const auto t = Thresholds();
  for (int s = 0; s <= 40; s++) c.Sample(t0 + seconds(s), 0, s > 31 ? 30.0 : 0, t);
  EXPECT_EQ(c.Want(t0 + seconds(40), t), Activity::kIdle);
}

TEST(IdleClockTest, HibernationCanBeTurnedOff) {
  const auto t0 = Clock::now();
  IdleClock c(t0);
  auto t = Thresholds();
  t.hibernate_after = milliseconds(0);
  EXPECT_EQ(c.Want(t0 + std::chrono::hours(10), t), Activity::kIdle);
}

TEST(SwapModeTest, Parses) {
  EXPECT_EQ(ParseSwapMode("auto")->mode, SwapMode::kAuto);
  EXPECT_EQ(ParseSwapMode("none")->mode, SwapMode::kNone);
  EXPECT_EQ(ParseSwapMode("host")->mode, SwapMode::kHost);
  auto z = ParseSwapMode("zram:2G");
  ASSERT_TRUE(z);
  EXPECT_EQ(z->mode, SwapMode::kZram);
  EXPECT_EQ(z->bytes, 2ull << 30);
  EXPECT_FALSE(ParseSwapMode("zram:1k"));
  auto f = ParseSwapMode("file:/var/lib/warren/swap");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->mode, SwapMode::kFile);
  EXPECT_EQ(f->path, "/var/lib/warren/swap");
  EXPECT_EQ(f->bytes, 0u);
  auto sized = ParseSwapMode("file:/var/lib/warren/swap:4G");
  ASSERT_TRUE(sized);
  EXPECT_EQ(sized->path, "/var/lib/warren/swap");
  EXPECT_EQ(sized->bytes, 4ull << 30);
  EXPECT_FALSE(ParseSwapMode("file:relative/swap"));
  EXPECT_FALSE(ParseSwapMode("file:"));
  EXPECT_FALSE(ParseSwapMode("file:/"));
  EXPECT_FALSE(ParseSwapMode("file:/a b"));
  EXPECT_FALSE(ParseSwapMode("file:/swap:1k"));
  EXPECT_FALSE(ParseSwapMode("file:/swap:big"));
  EXPECT_FALSE(ParseSwapMode("disk"));
}

// Admission only (enabled = false): no thread, no swap, nothing of the host touched.
std::unique_ptr<DensityManager> Admission(double mem_ratio, double cpu_ratio) {
  DensityOptions o;
  o.enabled = false;
  o.memory_budget_bytes = 1ull << 30;
  o.memory_overcommit = mem_ratio;
  o.cpu_overcommit = cpu_ratio;
  auto m = DensityManager::Start(o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(*m);
}

// What a node answers over the cluster wire reads back as it was, and anything else is refused.
TEST(SandboxDensityWireTest, RoundTripsAndRefusesWhatItDoesNotKnow) {
  SandboxDensity d;
  d.activity = Activity::kIdle;
  d.quiet_s = 12.5;
  d.memory.resident_bytes = 3 << 20;
  d.memory.swapped_bytes = 50 << 20;
  d.reclaimed_bytes = 60 << 20;
  d.wakes = 4;
  d.last_wake_ms = 9.5;
  auto back = ParseSandboxDensity(SandboxDensityJson(d));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->activity, Activity::kIdle);
  EXPECT_EQ(back->quiet_s, 12.5);
  EXPECT_EQ(back->memory.swapped_bytes, 50u << 20);
  EXPECT_EQ(back->reclaimed_bytes, 60u << 20);
  EXPECT_EQ(back->wakes, 4u);
  EXPECT_EQ(back->last_wake_ms, 9.5);
  auto j = SandboxDensityJson(d);
  j["activity"] = "asleep";
  EXPECT_FALSE(ParseSandboxDensity(j).ok());
  j = SandboxDensityJson(d);
  j["surprise"] = 1;
  EXPECT_FALSE(ParseSandboxDensity(j).ok());
  j = SandboxDensityJson(d);
  j.erase("wakes");
  EXPECT_FALSE(ParseSandboxDensity(j).ok());
  EXPECT_FALSE(ParseSandboxDensity(nlohmann::json::array()).ok());
}

TEST(DensityAdmissionTest, RequestsMayExceedTheBudgetByTheRatio) {
  auto m = Admission(2, 0);
  EXPECT_TRUE(m->Admit("a", 1ull << 30, 1).ok());
  EXPECT_TRUE(m->Admit("b", 768ull << 20, 1).ok());
  Status st = m->Admit("c", 512ull << 20, 1);
  EXPECT_EQ(st.code(), Code::kQuota) << st.ToString();
  EXPECT_NE(st.ToString().find("memory is committed"), std::string::npos) << st.ToString();
  // A deleted sandbox gives its request back.
  m->Forget("a");
  EXPECT_TRUE(m->Admit("c", 512ull << 20, 1).ok());
  const NodeDensity n = m->Node();
  EXPECT_EQ(n.committed_memory_bytes, (768ull + 512) << 20);
  EXPECT_EQ(n.refused_creates, 1u);
}

TEST(DensityAdmissionTest, CpuIsUnlimitedByDefaultAndLimitedByARatio) {
  auto unlimited = Admission(4, 0);
  for (int i = 0; i < 1000; ++i)
    ASSERT_TRUE(unlimited->Admit("s" + std::to_string(i), 1 << 20, 1).ok());
  auto limited = Admission(4, 1);
  const double host = limited->Node().host_cpus;
  EXPECT_TRUE(limited->Admit("a", 1 << 20, host).ok());
  EXPECT_EQ(limited->Admit("b", 1 << 20, 0.5).code(), Code::kQuota);
}

// A sandbox whose running command someone waits on (a blocking exec, a stream) is never frozen:
// the command could not end while frozen, and the caller would wait forever. It still goes
// idle; once no one waits, it hibernates.
TEST(DensityHibernationTest, ASandboxSomeoneWaitsOnIsNeverFrozen) {
  DensityOptions o;
  o.enabled = false;  // no thread and no swap: the test drives Tick
  o.memory_budget_bytes = 1ull << 30;
  o.idle.idle_after = seconds(1);
  o.idle.hibernate_after = seconds(2);
  auto m = DensityManager::Start(o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::atomic<bool> awaited{true};
  std::atomic<int> freezes{0}, thaws{0};
  TrackedSandbox t;
  t.id = "sb";
  t.paths.memory_dir = "/nonexistent/warren-test";  // every read fails: no samples
  t.freeze = [&](bool frozen) {
    (frozen ? freezes : thaws) += 1;
    return Status::Ok();
  };
  t.awaited = [&] { return awaited.load(); };
  (*m)->Add(t);
  (*m)->Tick(Clock::now() + seconds(60));
  EXPECT_EQ(freezes, 0);
  EXPECT_EQ((*m)->Sandbox("sb")->activity, Activity::kIdle);
  awaited = false;
  (*m)->Tick(Clock::now() + seconds(61));
  EXPECT_EQ(freezes, 1);
  EXPECT_EQ((*m)->Sandbox("sb")->activity, Activity::kHibernated);
  // Someone waits on it again (hibernated in the gap of a stream's re-poll): thawed.
  awaited = true;
  (*m)->Tick(Clock::now() + seconds(62));
  EXPECT_EQ(thaws, 1);
  EXPECT_NE((*m)->Sandbox("sb")->activity, Activity::kHibernated);
  (*m)->Forget("sb");
}

TEST(DensityAdmissionTest, AnAdoptedSandboxCountsOnce) {
  auto m = Admission(1, 0);
  EXPECT_TRUE(m->Admit("a", 512ull << 20, 1).ok());
  TrackedSandbox t;
  t.id = "a";
  t.memory_bytes = 512ull << 20;
  m->Add(t);  // made: its admitted request is the one counted
  TrackedSandbox adopted;
  adopted.id = "b";
  adopted.memory_bytes = 256ull << 20;
  m->Add(adopted);  // adopted after a restart: never admitted, counted now
  EXPECT_EQ(m->Node().committed_memory_bytes, 768ull << 20);
  m->Forget("a");
  m->Forget("b");
  EXPECT_EQ(m->Node().committed_memory_bytes, 0u);
}

TEST(DensityAdmissionTest, RatiosBelowOneAreRefused) {
  DensityOptions o;
  o.enabled = false;
  o.memory_overcommit = 0.5;
  EXPECT_EQ(DensityManager::Start(o).status().code(), Code::kInvalid);
}

}  // namespace
}  // namespace warren::node::density
