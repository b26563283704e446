// TxnCombiner: group commit for independent transactions. An API server makes many sandboxes
// at once, each with a few small transactions (its reservation with its claim, its record,
// its move to running); etcd's cost is mostly per transaction (a raft proposal, an fsync,
// the JSON gateway's request), not per key. So while one combined transaction is in flight,
// the next arrivals queue, and the first of them commits the whole queue as one transaction
// when it returns: every comparison of every member, then every member's writes. No timer: a
// lone transaction commits at once, alone.
//
// A combined transaction succeeds only if every member's comparisons hold. When it fails
// (some member lost a race, rare), nothing of it was written, and each member is committed
// again alone, so each caller gets exactly the answer its own transaction would have had
// (with its own failure branch's reads). Members that could not share one transaction wait
// for the next group: two that write the same key, one that writes a key another compares
// (their comparisons are all evaluated before any write), or more than etcd's 128
// comparisons or operations in all. A transaction whose success branch reads (its reads would see
// the others' writes) or deletes a range always commits alone.
//
// It is a KvStore: everything but Commit goes straight through, so the code that writes
// (KvStateStore, Reservations) does not know.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <vector>

#include "base/thread_annotations.h"
#include "cluster/kv_store.h"

namespace warren::cluster {

class TxnCombiner : public KvStore {
 public:
  // etcd's default --max-txn-ops: the bound on comparisons and on each branch's operations.
  static constexpr size_t kMaxOps = 128;

  explicit TxnCombiner(KvStore* kv) : kv_(kv) {}

  Result<TxnResult> Commit(const Txn& txn) override;

  Result<RangeResult> Range(const RangeRequest& req) override { return kv_->Range(req); }
  Result<int64_t> Put(const std::string& key, const std::string& value,
                      int64_t lease = 0) override {
    return kv_->Put(key, value, lease);
  }
  Result<int64_t> Delete(const std::string& key, const std::string& range_end = "") override {
    return kv_->Delete(key, range_end);
  }
  Result<int64_t> GrantLease(int64_t ttl_s) override { return kv_->GrantLease(ttl_s); }
  Result<int64_t> KeepAlive(int64_t lease) override { return kv_->KeepAlive(lease); }
  Status RevokeLease(int64_t lease) override { return kv_->RevokeLease(lease); }
  Result<std::unique_ptr<Watch>> WatchRange(const std::string& key, const std::string& range_end,
                                            int64_t start_revision,
                                            WatchCallbacks callbacks) override {
    return kv_->WatchRange(key, range_end, start_revision, std::move(callbacks));
  }

  // Transactions committed to the store and those the callers asked for (bench/cluster.py
  // reports the ratio); how many combined ones failed and were committed again one by one.
  uint64_t commits() const { return commits_.load(); }
  uint64_t members() const { return members_.load(); }
  uint64_t split() const { return split_.load(); }

 private:
  struct Item {
    const Txn* txn;
    bool done = false;
    Result<TxnResult> result;
  };
  // Whether `txn` may share a transaction with others at all.
  static bool Combinable(const Txn& txn);
  void CommitGroup(const std::vector<Item*>& group);

  KvStore* const kv_;
  Mutex mu_;
  std::condition_variable_any done_;
  std::deque<Item*> waiting_ GUARDED_BY(mu_);
  bool busy_ GUARDED_BY(mu_) = false;  // a group is being committed
  std::atomic<uint64_t> commits_{0}, members_{0}, split_{0};
};

}  // namespace warren::cluster
