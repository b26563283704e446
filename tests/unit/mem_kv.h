// MemKv: an in-memory KvStore for unit tests, with etcd's semantics where the code above
// relies on them: one global revision, transactions at one revision, leases whose keys go
// when they expire (on a clock the test moves), watches delivered in order on a thread of
// the store's from any retained revision, and compaction. The same conformance tests
// (kv_conformance.h) run against it and against a real etcd.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <thread>

#include "base/thread_annotations.h"
#include "cluster/kv_store.h"

namespace warren::cluster {

class MemKv : public KvStore {
 public:
  MemKv();
  ~MemKv() override;

  Result<RangeResult> Range(const RangeRequest& req) override;
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0) override;
  Result<int64_t> Delete(const std::string& key, const std::string& range_end = "") override;
  Result<TxnResult> Commit(const Txn& txn) override;
  Result<int64_t> GrantLease(int64_t ttl_s) override;
  Result<int64_t> KeepAlive(int64_t lease) override;
  Status RevokeLease(int64_t lease) override;
  Result<std::unique_ptr<Watch>> WatchRange(const std::string& key, const std::string& range_end,
                                            int64_t start_revision,
                                            WatchCallbacks callbacks) override;

  // Moves the leases' clock on; leases past their TTL expire (their keys are deleted).
  void Advance(double seconds);
  // Forgets history before `revision`: a watch from earlier ends with kConflict.
  void Compact(int64_t revision);
  // While unavailable, every call fails with kUnavailable (etcd down).
  void SetAvailable(bool available);
  // Blocks until every watch has been handed the events so far.
  void Drain();
  int64_t revision();
  uint64_t writes() const { return writes_.load(); }

 private:
  struct LeaseState {
    int64_t ttl = 0;
    double deadline = 0;
  };
  struct Event {
    int64_t revision;
    WatchEvent event;
  };
  class MemWatch;
  struct WatchState;

  Status Check(const std::string& op, const std::string& key) REQUIRES(mu_);
  bool Holds(const Compare& c) REQUIRES(mu_);
  bool HoldsFor(const Compare& c, const KeyValue* found) REQUIRES(mu_);  // null: missing
  RangeResult RangeLocked(const RangeRequest& req) REQUIRES(mu_);
  void PutLocked(const std::string& key, const std::string& value, int64_t lease) REQUIRES(mu_);
  int64_t DeleteLocked(const std::string& key, const std::string& range_end) REQUIRES(mu_);
  void RevokeLocked(int64_t lease) REQUIRES(mu_);
  void Dispatch();
  void Unregister(WatchState* w);

  Mutex mu_;
  std::condition_variable_any changed_;  // a write, a watch added or gone, a delivery done
  std::map<std::string, KeyValue> kvs_ GUARDED_BY(mu_);
  int64_t revision_ GUARDED_BY(mu_) = 1;
  std::deque<Event> history_ GUARDED_BY(mu_);
  int64_t compacted_ GUARDED_BY(mu_) = 0;
  std::map<int64_t, LeaseState> leases_ GUARDED_BY(mu_);
  int64_t next_lease_ GUARDED_BY(mu_) = 0x1000;
  double now_ GUARDED_BY(mu_) = 0;
  bool available_ GUARDED_BY(mu_) = true;
  std::vector<WatchState*> watches_ GUARDED_BY(mu_);
  int64_t dispatched_ GUARDED_BY(mu_) = 1;  // every watch has been handed events up to here
  WatchState* delivering_ GUARDED_BY(mu_) = nullptr;  // callbacks of this one run now
  bool stop_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> writes_{0};
  std::thread dispatcher_;
};

}  // namespace warren::cluster
