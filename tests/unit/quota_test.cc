#include "server/quota.h"

#include <gtest/gtest.h>

namespace warren::server {
namespace {

Principal Limited(int64_t n) {
  Principal p{"alice", {"sandbox:*"}, {}};
  p.quotas.max_sandboxes = n;
  return p;
}

TEST(Quota, FailedRecordsFoundAtStartupDoNotCount) {
  QuotaTracker q;
  q.Count({{{"id", "sb-1"}, {"owner", "alice"}, {"state", "running"}, {"cpu", 1.0}, {"memory_mb", 512}},
           {{"id", "sb-2"}, {"owner", "alice"}, {"state", "failed"}, {"cpu", 1.0}, {"memory_mb", 512}},
           {{"id", "sb-3"}, {"owner", "alice"}, {"state", "paused"}, {"cpu", 1.0}, {"memory_mb", 512}}});
  EXPECT_EQ(q.Usage("alice")["sandboxes"], 2);
  EXPECT_EQ(q.Usage("alice")["memory_mb"], 1024);
  EXPECT_TRUE(q.Reserve(Limited(3), 1, 512).ok());
  EXPECT_EQ(q.Reserve(Limited(3), 1, 512).code(), Code::kQuota);
}

TEST(Quota, AHeldShareIsGivenBackOnce) {
  QuotaTracker q;
  ASSERT_TRUE(q.Reserve(Limited(1), 1, 256).ok());
  q.Hold("sb-1");
  EXPECT_EQ(q.Reserve(Limited(1), 1, 256).code(), Code::kQuota);
  q.ReleaseHeld("sb-1", "alice", 1, 256);  // it failed
  q.ReleaseHeld("sb-1", "alice", 1, 256);  // then it is deleted: nothing more
  EXPECT_EQ(q.Usage("alice")["sandboxes"], 0);
  ASSERT_TRUE(q.Reserve(Limited(1), 1, 256).ok());
  q.ReleaseHeld("sb-never-held", "alice", 1, 256);
  EXPECT_EQ(q.Usage("alice")["sandboxes"], 1);
}

}  // namespace
}  // namespace warren::server
