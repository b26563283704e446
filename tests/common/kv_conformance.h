// What the cluster code relies on from a KvStore, as one suite run against both stores:
// MemKv in the unit tests and a real etcd in the cluster tests. A fake that passes it behaves
// like etcd where it matters. Include once per test binary, then instantiate:
//   INSTANTIATE_TEST_SUITE_P(Mem, KvConformance, testing::Values(KvTarget{...}));
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "cluster/kv_store.h"

namespace warren::cluster {

struct KvTarget {
  std::string name;
  std::function<std::unique_ptr<KvStore>()> make;
  // Lets `seconds` pass for the store's leases (MemKv moves its clock; etcd: a real wait).
  std::function<void(KvStore*, double)> pass_time;
  // Compacts history up to `revision` (a watch from before it must end).
  std::function<void(KvStore*, int64_t)> compact;
};

inline std::ostream& operator<<(std::ostream& os, const KvTarget& t) { return os << t.name; }

class KvConformance : public ::testing::TestWithParam<KvTarget> {
 protected:
  void SetUp() override {
    kv_ = GetParam().make();
    ASSERT_NE(kv_, nullptr);
    // Every test in its own key space: the real etcd is shared by the whole binary.
    prefix_ = "/t/" + std::to_string(std::random_device{}()) + "/";
  }
  std::string K(const std::string& k) const { return prefix_ + k; }

  // Collects a watch's events; Wait blocks until `n` have come.
  struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<WatchEvent> events;
    std::optional<Status> ended;
    WatchCallbacks Callbacks() {
      return {[this](const std::vector<WatchEvent>& evs) {
                std::lock_guard l(mu);
                events.insert(events.end(), evs.begin(), evs.end());
                cv.notify_all();
              },
              [this](const Status& st) {
                std::lock_guard l(mu);
                ended = st;
                cv.notify_all();
              }};
    }
    bool Wait(size_t n) {
      std::unique_lock l(mu);
      return cv.wait_for(l, std::chrono::seconds(10), [&] { return events.size() >= n; });
    }
    bool WaitEnd() {
      std::unique_lock l(mu);
      return cv.wait_for(l, std::chrono::seconds(10), [&] { return ended.has_value(); });
    }
  };

  std::unique_ptr<KvStore> kv_;
  std::string prefix_;
};

TEST_P(KvConformance, PutGetAndPrefixRanges) {
  auto r1 = kv_->Put(K("a/1"), "one");
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  auto r2 = kv_->Put(K("a/2"), std::string("t\0wo\xff", 5));
  ASSERT_TRUE(r2.ok());
  EXPECT_GT(*r2, *r1);
  ASSERT_TRUE(kv_->Put(K("a/3"), "three").ok());
  ASSERT_TRUE(kv_->Put(K("b/1"), "other").ok());

  auto one = kv_->Get(K("a/2"));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->value, std::string("t\0wo\xff", 5));  // binary values survive base64
  EXPECT_EQ(one->version, 1);
  EXPECT_EQ(one->create_revision, *r2);
  EXPECT_EQ(kv_->Get(K("a/9")).status().code(), Code::kNotFound);

  auto all = kv_->List(K("a/"));
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->kvs.size(), 3u);
  EXPECT_EQ(all->kvs[0].key, K("a/1"));
  EXPECT_EQ(all->kvs[2].key, K("a/3"));
  EXPECT_GE(all->revision, *r2);

  auto page = kv_->Range({.key = K("a/"), .range_end = PrefixEnd(K("a/")), .limit = 2});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->kvs.size(), 2u);
  EXPECT_EQ(page->count, 3);
  EXPECT_TRUE(page->more);

  auto count = kv_->Range({.key = K("a/"), .range_end = PrefixEnd(K("a/")), .count_only = true});
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->count, 3);
  EXPECT_TRUE(count->kvs.empty());

  // A second put of a key: same create revision, version 2.
  auto again = kv_->Put(K("a/1"), "uno");
  ASSERT_TRUE(again.ok());
  auto a1 = kv_->Get(K("a/1"));
  ASSERT_TRUE(a1.ok());
  EXPECT_EQ(a1->version, 2);
  EXPECT_EQ(a1->create_revision, *r1);
  EXPECT_EQ(a1->mod_revision, *again);
}

TEST_P(KvConformance, DeleteCountsAndRanges) {
  for (const char* k : {"x/1", "x/2", "y"}) ASSERT_TRUE(kv_->Put(K(k), "v").ok());
  auto n = kv_->Delete(K("x/"), PrefixEnd(K("x/")));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  auto none = kv_->Delete(K("x/1"));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  EXPECT_TRUE(kv_->Get(K("y")).ok());
}

TEST_P(KvConformance, CreateIfMissingHappensOnce) {
  auto create = [&](const std::string& v) {
    return kv_->Commit({.compare = {Compare::Missing(K("only"))},
                        .success = {TxnOp::Put(K("only"), v)},
                        .failure = {TxnOp::Get(K("only"))}});
  };
  auto first = create("first");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->succeeded);
  EXPECT_TRUE(first->gets.empty());
  auto second = create("second");
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->gets.size(), 1u);
  ASSERT_EQ(second->gets[0].kvs.size(), 1u);
  EXPECT_EQ(second->gets[0].kvs[0].value, "first");
  // A value comparison and a multi-key write at one revision.
  auto both = kv_->Commit(
      {.compare = {Compare::ValueIs(K("only"), "first")},
       .success = {TxnOp::Put(K("p"), "1"), TxnOp::Put(K("q"), "2"), TxnOp::Delete(K("only"))}});
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(both->succeeded);
  auto p = kv_->Get(K("p")), q = kv_->Get(K("q"));
  ASSERT_TRUE(p.ok() && q.ok());
  EXPECT_EQ(p->mod_revision, q->mod_revision);
  EXPECT_EQ(p->mod_revision, both->revision);
  EXPECT_EQ(kv_->Get(K("only")).status().code(), Code::kNotFound);
}

// A comparison over a range (the quota pattern: sum a prefix, write only if no key under it was
// written since): an empty range holds, a write under the prefix breaks it, a deletion does not.
TEST_P(KvConformance, RangeComparisonSeesWritesUnderThePrefix) {
  auto guarded = [&](int64_t rev, const std::string& key) {
    auto t = kv_->Commit({.compare = {Compare::NoneWrittenAfter(K("owner/"), rev)},
                          .success = {TxnOp::Put(K(key), "x")}});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() && t->succeeded;
  };
  auto empty = kv_->List(K("owner/"));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(guarded(empty->revision, "owner/a"));   // nothing under it yet
  EXPECT_FALSE(guarded(empty->revision, "owner/b"));  // owner/a was written since
  auto now = kv_->List(K("owner/"));
  ASSERT_TRUE(now.ok());
  EXPECT_TRUE(guarded(now->revision, "owner/b"));
  auto later = kv_->List(K("owner/"));
  ASSERT_TRUE(later.ok());
  ASSERT_TRUE(kv_->Delete(K("owner/a")).ok());
  EXPECT_TRUE(guarded(later->revision, "owner/c"));  // a deletion only frees room
  ASSERT_TRUE(kv_->Put(K("ownerz"), "x").ok());      // next to the prefix, not under it
  auto last = kv_->List(K("owner/"));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(guarded(last->revision, "elsewhere"));
}

// The reservation pattern: read, compute, write if unchanged (mod revision), else read again.
// Concurrent writers lose no update.
TEST_P(KvConformance, CompareAndSwapLosesNoUpdate) {
  constexpr int kThreads = 4, kEach = 15;
  std::atomic<int> conflicts{0};
  auto bump = [&] {
    for (int i = 0; i < kEach; ++i) {
      for (;;) {
        auto cur = kv_->Get(K("counter"));
        int64_t rev = 0, n = 0;
        if (cur.ok()) {
          rev = cur->mod_revision;
          n = std::stoll(cur->value);
        }
        auto t = kv_->Commit({.compare = {Compare::ModIs(K("counter"), rev)},
                              .success = {TxnOp::Put(K("counter"), std::to_string(n + 1))}});
        ASSERT_TRUE(t.ok()) << t.status().ToString();
        if (t->succeeded) break;
        ++conflicts;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(bump);
  for (auto& t : threads) t.join();
  auto v = kv_->Get(K("counter"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value, std::to_string(kThreads * kEach));
}

// What the idle deadlines rely on (cluster/idle_index.h): a value comparison orders
// fixed-width digits as numbers, and fails on a missing key.
TEST_P(KvConformance, AValueComparisonOrdersDigitsAndFailsOnAMissingKey) {
  auto move_to = [&](const std::string& v) {
    auto t = kv_->Commit(
        {.compare = {Compare{K("deadline"), Compare::Target::kValue, Compare::Op::kLess, 0, v}},
         .success = {TxnOp::Put(K("deadline"), v)}});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() && t->succeeded;
  };
  EXPECT_FALSE(move_to("000000000000200"));  // missing: nothing to move
  EXPECT_FALSE(kv_->Get(K("deadline")).ok());
  ASSERT_TRUE(kv_->Put(K("deadline"), "000000000000100").ok());
  EXPECT_TRUE(move_to("000000000000200"));
  EXPECT_FALSE(move_to("000000000000150"));  // earlier: kept
  EXPECT_FALSE(move_to("000000000000200"));  // the same: kept
  EXPECT_TRUE(move_to("000000000001000"));
  EXPECT_EQ(kv_->Get(K("deadline"))->value, "000000000001000");
}

TEST_P(KvConformance, LeasedKeysGoWithTheLease) {
  auto lease = kv_->GrantLease(2);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(kv_->Put(K("node/a"), "up", *lease).ok());
  auto kept = kv_->Get(K("node/a"));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->lease, *lease);
  auto ttl = kv_->KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GE(*ttl, 1);
  ASSERT_TRUE(kv_->RevokeLease(*lease).ok());
  EXPECT_EQ(kv_->Get(K("node/a")).status().code(), Code::kNotFound);
  EXPECT_EQ(kv_->KeepAlive(*lease).status().code(), Code::kNotFound);
  // A put with a lease that is gone fails and writes nothing.
  EXPECT_EQ(kv_->Put(K("node/b"), "up", *lease).status().code(), Code::kNotFound);
  EXPECT_EQ(kv_->Get(K("node/b")).status().code(), Code::kNotFound);

  // Expiry: no keepalive for longer than the TTL.
  auto short_lease = kv_->GrantLease(2);
  ASSERT_TRUE(short_lease.ok());
  ASSERT_TRUE(kv_->Put(K("node/c"), "up", *short_lease).ok());
  GetParam().pass_time(kv_.get(), 4.5);
  EXPECT_EQ(kv_->Get(K("node/c")).status().code(), Code::kNotFound);
  EXPECT_EQ(kv_->KeepAlive(*short_lease).status().code(), Code::kNotFound);
}

TEST_P(KvConformance, WatchSeesEveryChangeInOrder) {
  auto start = kv_->Put(K("w/0"), "before");
  ASSERT_TRUE(start.ok());
  Collector from_now, from_past;
  auto live = kv_->WatchRange(K("w/"), PrefixEnd(K("w/")), 0, from_now.Callbacks());
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_TRUE(kv_->Put(K("w/1"), "a").ok());
  ASSERT_TRUE(kv_->Put(K("elsewhere"), "x").ok());
  ASSERT_TRUE(kv_->Put(K("w/1"), "b").ok());
  ASSERT_TRUE(kv_->Delete(K("w/1")).ok());
  ASSERT_TRUE(from_now.Wait(3));
  {
    std::lock_guard l(from_now.mu);
    ASSERT_EQ(from_now.events.size(), 3u);
    EXPECT_EQ(from_now.events[0].type, WatchEvent::Type::kPut);
    EXPECT_EQ(from_now.events[0].kv.value, "a");
    EXPECT_EQ(from_now.events[1].kv.value, "b");
    EXPECT_EQ(from_now.events[1].kv.version, 2);
    EXPECT_EQ(from_now.events[2].type, WatchEvent::Type::kDelete);
    EXPECT_EQ(from_now.events[2].kv.key, K("w/1"));
    EXPECT_GT(from_now.events[2].kv.mod_revision, from_now.events[1].kv.mod_revision);
  }
  // From a past revision: the history is replayed, the first put included.
  auto replay = kv_->WatchRange(K("w/"), PrefixEnd(K("w/")), *start, from_past.Callbacks());
  ASSERT_TRUE(replay.ok());
  ASSERT_TRUE(from_past.Wait(4));
  {
    std::lock_guard l(from_past.mu);
    EXPECT_EQ(from_past.events[0].kv.value, "before");
  }
  // A watch that is gone calls nothing more.
  live->reset();
  ASSERT_TRUE(kv_->Put(K("w/2"), "after").ok());
  ASSERT_TRUE(from_past.Wait(5));
  std::lock_guard l(from_now.mu);
  EXPECT_EQ(from_now.events.size(), 3u);
}

TEST_P(KvConformance, WatchFromCompactedRevisionEnds) {
  auto first = kv_->Put(K("c/1"), "1");
  ASSERT_TRUE(first.ok());
  auto last = kv_->Put(K("c/1"), "2");
  ASSERT_TRUE(last.ok());
  GetParam().compact(kv_.get(), *last);
  Collector c;
  auto w = kv_->WatchRange(K("c/"), PrefixEnd(K("c/")), *first, c.Callbacks());
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(c.WaitEnd());
  std::lock_guard l(c.mu);
  EXPECT_EQ(c.ended->code(), Code::kConflict);
  EXPECT_TRUE(c.events.empty());
}

TEST(PrefixEnd, IsTheNextKeyAfterThePrefix) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd("a\xff"), "b");
  EXPECT_EQ(PrefixEnd("\xff\xff"), std::string(1, '\0'));
}

}  // namespace warren::cluster
