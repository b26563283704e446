// TxnCombiner over MemKv: concurrent independent transactions share commits and each caller
// gets its own answer; a member whose comparison fails fails alone (with its own failure
// reads) while the others are written; members writing one key, and transactions that read,
// are never combined.
#include "cluster/txn_combiner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "mem_kv.h"

namespace warren::cluster {
namespace {

Txn PutIfMissing(const std::string& key, const std::string& value) {
  Txn t;
  t.compare = {Compare::Missing(key)};
  t.success = {TxnOp::Put(key, value)};
  t.failure = {TxnOp::Get(key)};
  return t;
}

// A store whose commits take a while, as etcd's do (a raft round and an fsync): arrivals
// meanwhile queue behind the one in flight.
class SlowKv : public MemKv {
 public:
  Result<TxnResult> Commit(const Txn& txn) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return MemKv::Commit(txn);
  }
};

TEST(TxnCombiner, ConcurrentTransactionsShareCommitsAndEachGetsItsAnswer) {
  SlowKv kv;
  TxnCombiner combined(&kv);
  ASSERT_TRUE(kv.Put("/k/taken-7", "earlier").ok());
  constexpr int kThreads = 16, kEach = 50;
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string key =
            (t == 7 && i == 0) ? "/k/taken-7" : "/k/" + std::to_string(t) + "-" + std::to_string(i);
        auto r = combined.Commit(PutIfMissing(key, "v"));
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        if (r->succeeded) {
          ++ok;
        } else {
          // Its own failure branch ran: it sees the value that was there.
          ASSERT_EQ(r->gets.size(), 1u);
          ASSERT_EQ(r->gets[0].kvs.size(), 1u);
          EXPECT_EQ(r->gets[0].kvs[0].value, "earlier");
          ++refused;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), kThreads * kEach - 1);
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(kv.Get("/k/taken-7")->value, "earlier");
  EXPECT_EQ(kv.List("/k/")->kvs.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(combined.members(), static_cast<uint64_t>(kThreads * kEach));
  // 16 callers, each waiting on its commit: most commits carry several of them.
  EXPECT_LT(combined.commits(), combined.members() / 4);
  EXPECT_LE(combined.split(), 1u);  // at most the group of the one that lost its race
}

TEST(TxnCombiner, WritersOfOneKeyAndReadersAreNotCombined) {
  MemKv kv;
  TxnCombiner combined(&kv);
  // Many writers of one counter, each compare-and-swap: combined, they would collide.
  ASSERT_TRUE(kv.Put("/c", "0").ok());
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        for (;;) {
          auto cur = kv.Get("/c");
          ASSERT_TRUE(cur.ok());
          Txn t;
          t.compare = {Compare::ModIs("/c", cur->mod_revision)};
          t.success = {TxnOp::Put("/c", std::to_string(std::stoi(cur->value) + 1))};
          auto r = combined.Commit(t);
          ASSERT_TRUE(r.ok());
          if (r->succeeded) break;
        }
        ++done;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(kv.Get("/c")->value, "160");

  // A transaction that reads in its success branch commits alone and gets its reads.
  Txn reader;
  reader.success = {TxnOp::Put("/r", "1"), TxnOp::Get("/c")};
  auto r = combined.Commit(reader);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->succeeded);
  ASSERT_EQ(r->gets.size(), 1u);
  EXPECT_EQ(r->gets[0].kvs[0].value, "160");
}

// The quota admission of two creates of one owner (KvStateStore::PutSandboxIfShare): each
// sums the owner's shares, then inserts its own share only if none was written since. In one
// combined transaction both comparisons would be evaluated before either write: both pass,
// and a limit of 3 admits 4. They must commit one after the other.
TEST(TxnCombiner, AWriterOfWhatAnotherComparesIsNotCombinedWithIt) {
  SlowKv kv;
  TxnCombiner combined(&kv);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(kv.Put("/shares/o/" + std::to_string(i), "1").ok());
  const int64_t limit = 3;
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (;;) {
        RangeRequest req;
        req.key = "/shares/o/";
        req.range_end = PrefixEnd("/shares/o/");
        auto held = kv.Range(req);
        ASSERT_TRUE(held.ok());
        if (static_cast<int64_t>(held->kvs.size()) >= limit) return;
        Txn txn;
        txn.compare = {Compare::NoneWrittenAfter("/shares/o/", held->revision)};
        txn.success = {TxnOp::Put("/shares/o/new" + std::to_string(t), "1")};
        auto r = combined.Commit(txn);
        ASSERT_TRUE(r.ok());
        if (r->succeeded) {
          ++admitted;
          return;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(admitted.load(), 1);
  RangeRequest all;
  all.key = "/shares/o/";
  all.range_end = PrefixEnd("/shares/o/");
  EXPECT_EQ(kv.Range(all)->kvs.size(), 3u);
}

}  // namespace
}  // namespace warren::cluster
