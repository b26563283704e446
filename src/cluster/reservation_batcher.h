// ReservationBatcher: group commit for single creates. An API server serves many creates at
// once; those that pick the same node share one reservation transaction. While one is in
// flight the next arrivals queue, and the first of them commits the whole queue (up to etcd's
// 128 operations a transaction) once it returns. No timer: a lone create commits at once;
// under load a group is what arrived during one commit, so etcd's fsync is paid per group
// rather than per sandbox.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "cluster/reservations.h"

namespace warren::cluster {

class ReservationBatcher {
 public:
  // etcd's default --max-txn-ops is 128; one goes to the allocation itself.
  static constexpr size_t kMaxOps = 127;

  explicit ReservationBatcher(Reservations* reservations) : res_(reservations) {}

  // Reserves `each` on `node` within `limit` and writes `ops` in the same transaction. kQuota
  // when the node has no room for it (the caller tries its next node); the store's error when
  // the transaction failed.
  Status Reserve(const std::string& node, const Resources& each, const Resources& limit,
                 std::vector<TxnOp> ops);

  // Transactions committed and sandboxes they carried (bench/cluster.py reports the ratio).
  uint64_t groups() const { return groups_.load(); }
  uint64_t items() const { return items_.load(); }

 private:
  struct Item {
    Resources each, limit;
    std::vector<TxnOp> ops;
    bool done = false;
    Status result;
  };
  struct NodeQueue {
    std::deque<Item*> waiting;
    bool busy = false;  // a group of this node is being committed
  };
  void CommitGroup(const std::string& node, std::vector<Item*>& group);

  Reservations* const res_;
  Mutex mu_;
  std::condition_variable_any done_;
  std::map<std::string, NodeQueue> queues_ GUARDED_BY(mu_);
  std::atomic<uint64_t> groups_{0}, items_{0};
};

}  // namespace warren::cluster
