#include "server/quota.h"

#include <gtest/gtest.h>

#include "cluster/kv_state_store.h"
#include "mem_kv.h"

namespace warren::server {
namespace {

Principal Limited(int64_t n) {
  Principal p{"alice", {"sandbox:*"}, {}};
  p.quotas.max_sandboxes = n;
  return p;
}

TEST(Quota, FailedRecordsFoundAtStartupDoNotCount) {
  QuotaTracker q;
  auto rec = [](const char* id, SandboxState state) {
    SandboxRecord r;
    r.id = id;
    r.owner = "alice";
    r.state = state;
    r.spec.cpu = 1.0;
    r.spec.memory_mb = 512;
    return r;
  };
  q.Count({rec("sb-1", SandboxState::kRunning), rec("sb-2", SandboxState::kFailed),
           rec("sb-3", SandboxState::kPaused)});
  EXPECT_EQ(q.Usage("alice")["sandboxes"], 2);
  EXPECT_EQ(q.Usage("alice")["memory_mb"], 1024);
  EXPECT_TRUE(q.Reserve(Limited(3), 1, 512).ok());
  EXPECT_EQ(q.Reserve(Limited(3), 1, 512).code(), Code::kQuota);
}

// (That a share is given back once, when its sandbox fails and not again when it is deleted,
// is the record's rule: api_test.cc, EachSandboxIsServedByTheNodeItsRecordNames.)

// A cluster's store counts shares: the tracker then keeps only the rate, and reports the
// store's use.
TEST(Quota, AStoreThatCountsSharesHoldsTheLimits) {
  cluster::MemKv kv;
  cluster::KvStateStore store(&kv);
  QuotaTracker q;
  q.CountSharesIn(&store);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(q.Reserve(Limited(1), 1, 256).ok());  // checked at insert
  ASSERT_TRUE(store
                  .InsertSandbox({{"id", "sb-1"},
                                  {"owner", "alice"},
                                  {"state", "running"},
                                  {"cpu", 2.0},
                                  {"memory_mb", 256}},
                                 LimitsOf(Limited(1).quotas))
                  .ok());
  EXPECT_EQ(store
                .InsertSandbox({{"id", "sb-2"}, {"owner", "alice"}, {"state", "creating"}},
                               LimitsOf(Limited(1).quotas))
                .status()
                .code(),
            Code::kQuota);
  q.Release("alice", 2, 256);  // the store's record decides, not this
  EXPECT_EQ(q.Usage("alice")["sandboxes"], 1);
  EXPECT_EQ(q.Usage("alice")["cpu"], 2.0);
  // The rate is still the tracker's.
  Principal rated = Limited(0);
  rated.quotas.create_rate = 1;
  EXPECT_TRUE(q.Reserve(rated, 1, 0).ok());
  EXPECT_EQ(q.Reserve(rated, 1, 0).code(), Code::kQuota);
}

TEST(Quota, CallsAtOnceAndPerSecond) {
  QuotaTracker q;
  Principal p;
  p.name = "caller";
  p.quotas.max_calls = 3;
  ASSERT_TRUE(q.ReserveCalls(p, 2).ok());
  Status over = q.ReserveCalls(p, 2);
  EXPECT_EQ(over.code(), Code::kQuota);
  EXPECT_EQ(over.retry_after_s(), 1);
  EXPECT_EQ(q.ReserveCalls(p, 4).code(), Code::kInvalid);  // could never run
  EXPECT_EQ(q.CallsRunning(), 2);
  q.ReleaseCalls("caller", 2);
  EXPECT_TRUE(q.ReserveCalls(p, 3).ok());
  q.ReleaseCalls("caller", 3);

  Principal r;
  r.name = "rated";
  r.quotas.call_rate = 0.5;                // burst 1
  ASSERT_TRUE(q.ReserveCalls(r, 5).ok());  // one token, and four more of debt
  q.ReleaseCalls("rated", 5);
  Status slow = q.ReserveCalls(r, 1);
  EXPECT_EQ(slow.code(), Code::kQuota);
  EXPECT_GE(slow.retry_after_s(), 9);  // (1 - (-4)) / 0.5 = 10 s, less what passed
  EXPECT_LE(slow.retry_after_s(), 10);
}

}  // namespace
}  // namespace warren::server
