// The cluster's TTL expiry over MemKv: records index their deadline when inserted and drop it
// when removed; one replica leads at a time (under its presence lease) and expires what is
// due, only that; when the leader's lease ends another takes over; a stale index entry goes.
#include "cluster/expiry_sweeper.h"

#include <gtest/gtest.h>

#include "cluster/keys.h"
#include "cluster/kv_state_store.h"
#include "mem_kv.h"

namespace warren::cluster {
namespace {

// 2026-12-02T00:00:00Z in Unix milliseconds.
constexpr int64_t kT0 = 1796169600000;

nlohmann::json Record(const std::string& id, int ttl_s) {
  return {
      {"id", id},   {"owner", "o"},   {"state", "running"}, {"created_at", "2026-12-02T00:00:00Z"},
      {"cpu", 1.0}, {"memory_mb", 0}, {"ttl_s", ttl_s}};
}

struct Replica {
  Replica(MemKv* kv, KvStateStore* store, const std::string& name) {
    lease = *kv->GrantLease(5);
    sweeper = std::make_unique<ExpirySweeper>(
        kv, name, [this] { return lease; },
        [this, store](const std::string& id) -> Status {
          expired.push_back(id);
          // As the API's delete answers: not_found for a record that is gone.
          WARREN_RETURN_IF_ERROR(store->GetSandbox(id).status());
          return store->RemoveSandbox(id);
        });
  }
  int64_t lease = 0;
  std::vector<std::string> expired;
  std::unique_ptr<ExpirySweeper> sweeper;
};

int64_t IndexEntries(MemKv* kv) {
  RangeRequest req{.key = keys::kExpiry, .range_end = PrefixEnd(keys::kExpiry), .count_only = true};
  return kv->Range(req)->count;
}

TEST(ExpirySweeper, OneLeaderExpiresWhatIsDueAndOnlyThat) {
  MemKv kv;
  KvStateStore store(&kv, "api-a");
  ASSERT_TRUE(store.InsertSandbox(Record("sb-short", 60), {}).ok());
  ASSERT_TRUE(store.InsertSandbox(Record("sb-long", 3600), {}).ok());
  EXPECT_EQ(IndexEntries(&kv), 2);

  Replica a(&kv, &store, "api-a"), b(&kv, &store, "api-b");
  EXPECT_EQ(a.sweeper->Sweep(kT0 + 59'999), 0);  // nothing due yet; a leads now
  EXPECT_TRUE(a.sweeper->leading());
  EXPECT_EQ(b.sweeper->Sweep(kT0 + 61'000), 0);  // b does not lead: it expires nothing
  EXPECT_FALSE(b.sweeper->leading());
  EXPECT_TRUE(b.expired.empty());

  EXPECT_EQ(a.sweeper->Sweep(kT0 + 60'000), 1);
  EXPECT_EQ(a.expired, std::vector<std::string>{"sb-short"});
  EXPECT_EQ(store.GetSandbox("sb-short").status().code(), Code::kNotFound);
  EXPECT_TRUE(store.GetSandbox("sb-long").ok());
  EXPECT_EQ(IndexEntries(&kv), 1);  // the removal took its index entry with it

  // a dies: its lease ends, and b takes over.
  ASSERT_TRUE(kv.RevokeLease(a.lease).ok());
  EXPECT_EQ(b.sweeper->Sweep(kT0 + 3'600'000), 1);
  EXPECT_TRUE(b.sweeper->leading());
  EXPECT_EQ(b.expired, std::vector<std::string>{"sb-long"});
  EXPECT_EQ(IndexEntries(&kv), 0);
}

TEST(ExpirySweeper, AStaleIndexEntryIsDropped) {
  MemKv kv;
  KvStateStore store(&kv, "api-a");
  ASSERT_TRUE(kv.Put(keys::Expiry(kT0, "sb-gone"), "").ok());
  Replica a(&kv, &store, "api-a");
  EXPECT_EQ(a.sweeper->Sweep(kT0 + 1), 0);
  EXPECT_EQ(a.expired, std::vector<std::string>{"sb-gone"});
  EXPECT_EQ(IndexEntries(&kv), 0);
}

TEST(ExpirySweeper, AFailedExpiryIsTriedAgain) {
  MemKv kv;
  KvStateStore store(&kv, "api-a");
  ASSERT_TRUE(store.InsertSandbox(Record("sb-1", 1), {}).ok());
  int tries = 0;
  auto lease = *kv.GrantLease(5);
  ExpirySweeper s(
      &kv, "api-a", [&] { return lease; },
      [&](const std::string& id) -> Status {
        if (++tries == 1) return Status(Code::kUnavailable, "reach node", "n1", "out of reach");
        return store.RemoveSandbox(id);
      });
  EXPECT_EQ(s.Sweep(kT0 + 2000), 0);
  EXPECT_EQ(IndexEntries(&kv), 1);
  EXPECT_EQ(s.Sweep(kT0 + 3000), 1);
  EXPECT_EQ(IndexEntries(&kv), 0);
}

}  // namespace
}  // namespace warren::cluster
