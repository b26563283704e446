// Idle timeouts on a cluster over MemKv (cluster/idle_index.h): the insert writes the first
// deadline, uses written by any replica move it later (never earlier, never for a sandbox that
// went), the sweeping replica ends what is due and idle, re-arms what is busy, and drops the
// index entries that later uses left stale.
#include "cluster/idle_index.h"

#include <gtest/gtest.h>

#include <atomic>

#include "cluster/expiry_sweeper.h"
#include "cluster/idle_refresher.h"
#include "cluster/keys.h"
#include "cluster/kv_state_store.h"
#include "mem_kv.h"

namespace warren::cluster {
namespace {

constexpr int64_t kT0 = 1796169600000;  // 2026-12-02T00:00:00Z
constexpr int64_t kTimeout = 100'000;   // idle_timeout_s 100: slack 25 s

nlohmann::json Record(const std::string& id, std::optional<int> idle_s = 100) {
  return {{"id", id},
          {"owner", "o"},
          {"state", "running"},
          {"created_at", "2026-12-02T00:00:00Z"},
          {"cpu", 1.0},
          {"memory_mb", 0},
          {"ttl_s", 86400},
          {"idle_timeout_s", idle_s ? nlohmann::json(*idle_s) : nlohmann::json(nullptr)}};
}

int64_t Count(MemKv* kv, const std::string& prefix) {
  RangeRequest req{.key = prefix, .range_end = PrefixEnd(prefix), .count_only = true};
  return kv->Range(req)->count;
}

std::string IdleAt(MemKv* kv, const std::string& id) {
  auto v = kv->Get(keys::IdleAt(id));
  return v.ok() ? v->value : "";
}

struct Cluster {
  MemKv kv;
  KvStateStore store{&kv, "api-a"};
  int64_t lease = *kv.GrantLease(5);
  std::vector<std::string> ended;
  std::set<std::string> busy;
  ExpirySweeper sweeper{&kv, "api-a", [this] { return lease; },
                        [this](const std::string& id) { return store.RemoveSandbox(id); }};
  std::atomic<int64_t> now{kT0};
  IdleRefresher uses{&kv, [this] { return now.load(); }};

  Cluster() {
    sweeper.SetIdle([this](const std::string& id) -> Result<bool> {
      WARREN_RETURN_IF_ERROR(store.GetSandbox(id).status());
      if (busy.count(id)) return false;
      ended.push_back(id);
      WARREN_RETURN_IF_ERROR(store.RemoveSandbox(id));
      return true;
    });
  }
};

TEST(IdleIndex, TheDeadlineIsTheLastUsePlusTimeoutPlusSlack) {
  EXPECT_EQ(IdleSlackMs(100'000), 25'000);
  EXPECT_EQ(IdleSlackMs(1'000), 1'000);        // at least a second
  EXPECT_EQ(IdleSlackMs(86'400'000), 60'000);  // at most a minute
  EXPECT_EQ(IdleDeadlineMs(kT0, kTimeout), kT0 + 125'000);
  EXPECT_EQ(IdleTimeoutMsOf(Record("a")), 100'000);
  EXPECT_EQ(IdleTimeoutMsOf(Record("a", std::nullopt)), 0);
}

TEST(IdleIndex, AnUnusedSandboxEndsAtItsDeadlineAndOnlyThen) {
  Cluster c;
  ASSERT_TRUE(c.store.InsertSandbox(Record("sb-idle"), {}).ok());
  ASSERT_TRUE(c.store.InsertSandbox(Record("sb-no-idle", std::nullopt), {}).ok());
  EXPECT_EQ(IdleAt(&c.kv, "sb-idle"), keys::ExpiryMs(kT0 + 125'000));
  EXPECT_EQ(IdleAt(&c.kv, "sb-no-idle"), "");
  EXPECT_EQ(Count(&c.kv, keys::kIdle), 1);

  EXPECT_EQ(c.sweeper.Sweep(kT0 + 124'999), 0);
  EXPECT_TRUE(c.ended.empty());
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 125'000), 1);
  EXPECT_EQ(c.ended, std::vector<std::string>{"sb-idle"});
  EXPECT_EQ(c.store.GetSandbox("sb-idle").status().code(), Code::kNotFound);
  EXPECT_TRUE(c.store.GetSandbox("sb-no-idle").ok());
  EXPECT_EQ(Count(&c.kv, keys::kIdle), 0);
  EXPECT_EQ(Count(&c.kv, keys::kIdleAt), 0);
}

TEST(IdleIndex, AUseAtAnyReplicaMovesTheDeadlineAndTheOldEntryGoesStale) {
  Cluster c;
  ASSERT_TRUE(c.store.InsertSandbox(Record("sb-1"), {}).ok());
  c.now = kT0 + 50'000;
  c.uses.Touch("sb-1", 100);
  EXPECT_EQ(c.uses.Flush(), 1);
  EXPECT_EQ(IdleAt(&c.kv, "sb-1"), keys::ExpiryMs(kT0 + 175'000));
  // Within the slack, another use of this replica writes nothing.
  c.now = kT0 + 60'000;
  c.uses.Touch("sb-1", 100);
  EXPECT_EQ(c.uses.Flush(), 0);
  // A second replica's use writes its own (later) deadline.
  IdleRefresher other(&c.kv, [] { return kT0 + 70'000; });
  other.Touch("sb-1", 100);
  EXPECT_EQ(other.Flush(), 1);
  EXPECT_EQ(IdleAt(&c.kv, "sb-1"), keys::ExpiryMs(kT0 + 195'000));
  // A write of an earlier deadline (a replica whose clock or flush lags) changes nothing.
  IdleRefresher late(&c.kv, [] { return kT0 + 55'000; });
  late.Touch("sb-1", 100);
  EXPECT_EQ(late.Flush(), 1);  // written as far as it knows: the comparison kept the later one
  EXPECT_EQ(IdleAt(&c.kv, "sb-1"), keys::ExpiryMs(kT0 + 195'000));

  // The first deadline comes: its entry is stale, nothing ends.
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 125'000), 0);
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 180'000), 0);
  EXPECT_TRUE(c.ended.empty());
  EXPECT_EQ(Count(&c.kv, keys::kIdle), 1);  // only the current one is left
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 195'000), 1);
  EXPECT_EQ(c.ended, std::vector<std::string>{"sb-1"});
}

TEST(IdleIndex, ABusySandboxIsKeptAndItsDeadlineCountsFromNow) {
  Cluster c;
  ASSERT_TRUE(c.store.InsertSandbox(Record("sb-busy"), {}).ok());
  c.busy.insert("sb-busy");
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 130'000), 0);
  EXPECT_EQ(IdleAt(&c.kv, "sb-busy"), keys::ExpiryMs(kT0 + 130'000 + 125'000));
  EXPECT_EQ(Count(&c.kv, keys::kIdle), 1);
  c.busy.clear();
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 254'999), 0);
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 255'000), 1);
}

TEST(IdleIndex, AUseOfAGoneSandboxWritesNothingAndABatchSplitsAroundIt) {
  Cluster c;
  const size_t n = IdleRefresher::kPerTxn + 5;
  for (size_t i = 0; i < n; ++i)
    ASSERT_TRUE(c.store.InsertSandbox(Record("sb-" + std::to_string(i)), {}).ok());
  ASSERT_TRUE(c.store.RemoveSandbox("sb-3").ok());
  EXPECT_EQ(IdleAt(&c.kv, "sb-3"), "");
  c.now = kT0 + 10'000;
  for (size_t i = 0; i < n; ++i) c.uses.Touch("sb-" + std::to_string(i), 100);
  c.uses.Flush();
  EXPECT_EQ(IdleAt(&c.kv, "sb-3"), "");  // not brought back
  for (size_t i = 0; i < n; ++i)
    if (i != 3)
      EXPECT_EQ(IdleAt(&c.kv, "sb-" + std::to_string(i)), keys::ExpiryMs(kT0 + 135'000)) << i;
}

TEST(IdleIndex, MoreDueThanOneTransactionHoldsAllEnd) {
  Cluster c;
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE(c.store.InsertSandbox(Record("sb-" + std::to_string(i)), {}).ok());
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 125'000), 300);
  EXPECT_EQ(Count(&c.kv, keys::kIdleAt), 0);
}

TEST(IdleIndex, OnlyTheLeaderEndsIdleSandboxes) {
  Cluster c;
  ASSERT_TRUE(c.store.InsertSandbox(Record("sb-1"), {}).ok());
  EXPECT_EQ(c.sweeper.Sweep(kT0), 0);  // a leads
  int calls = 0;
  auto lease_b = *c.kv.GrantLease(5);
  ExpirySweeper b(
      &c.kv, "api-b", [&] { return lease_b; }, [&](const std::string&) { return Status::Ok(); });
  b.SetIdle([&](const std::string&) -> Result<bool> {
    ++calls;
    return true;
  });
  EXPECT_EQ(b.Sweep(kT0 + 200'000), 0);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(c.sweeper.Sweep(kT0 + 200'000), 1);
}

}  // namespace
}  // namespace warren::cluster
