// Reservations: the binding half of placement. What placement reserved on a node lives at
// /warren/alloc/NAME (an Allocation). Reserving adds to it in one etcd transaction that
// compares the key's mod revision with the one the sum was checked against: two API servers
// placing on one node at once cannot both succeed on a stale sum, so no node goes past its
// overcommit ratio. The loser reads the new sum (in the same round trip: the transaction's
// failure branch returns it) and tries again.
//
// The last value read per node is cached: a reservation on a node nobody else touched since
// costs one transaction, not a read and a write.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "cluster/kv_store.h"
#include "cluster/node_record.h"

namespace warren::cluster {

class Reservations {
 public:
  // Another view of the sums, with the mod revision each was read at (an API server's
  // NodeDirectory, fed by a watch: it sees other replicas' writes within milliseconds).
  using Source = std::function<std::optional<std::pair<Allocation, int64_t>>(const std::string&)>;

  // `watched`, if set, is consulted before each reservation: when it holds a newer sum than
  // the one this replica last read or wrote, that sum is the base of the compare-and-swap,
  // so another replica's write since costs no lost race.
  explicit Reservations(KvStore* kv, Source watched = nullptr)
      : kv_(kv), watched_(std::move(watched)) {}

  // Writes to make in the same transaction as a reservation of `count` sandboxes (their
  // records, so that a record exists if and only if its reservation does).
  using ExtraOps = std::function<std::vector<TxnOp>(int64_t count)>;

  // Reserves `each` for `count` sandboxes on `node` if the sum stays within `limit`; with
  // `partial`, as many as fit (0 included). Returns how many were reserved; kQuota when none
  // fit and !partial.
  Result<int64_t> Reserve(const std::string& node, const Resources& each, int64_t count,
                          const Resources& limit, bool partial, const ExtraOps& extra = nullptr);
  // Reserves the longest leading run of `items` (one sandbox each) that fits within `limit`;
  // returns its length (0 when the first does not fit). `extra(n)` gets that length.
  Result<int64_t> ReserveEach(const std::string& node, const std::vector<Resources>& items,
                              const Resources& limit, const ExtraOps& extra = nullptr);
  // Gives back what `count` sandboxes of `each` reserved, with `extra` writes in the same
  // transaction (the records' removal).
  // With `also`, only if those hold too: kConflict (nothing written) when one does not.
  Status Release(const std::string& node, const Resources& each, int64_t count,
                 const std::vector<TxnOp>& extra = {}, const std::vector<Compare>& also = {});
  // The node's allocation as etcd has it now (and the cache updated).
  Result<Allocation> Read(const std::string& node);
  // The sum this replica last read or wrote for `node`, and its mod revision (none: unknown).
  std::optional<std::pair<Allocation, int64_t>> LastSeen(const std::string& node);
  // Transactions that lost a race and were retried (bench/cluster.py reports it).
  uint64_t conflicts() const { return conflicts_.load(); }

 private:
  struct Cached {
    Allocation alloc;
    int64_t mod_revision = 0;  // 0: the key does not exist
  };
  Result<Cached> Load(const std::string& node);
  void Remember(const std::string& node, const RangeResult& got);
  // Looks at the current sum and fills in the new one; returns how many sandboxes the change
  // covers (0: nothing to write).
  using Plan = std::function<int64_t(const Allocation& cur, Allocation* next)>;
  // Commits `plan`'s change by compare-and-swap, planning again on the fresh sum after a lost
  // race. Returns the count planned.
  // `also`: further comparisons; when one fails (the allocation itself unchanged), kConflict.
  Result<int64_t> Apply(const std::string& node, const Plan& plan, const ExtraOps& extra,
                        const std::vector<Compare>& also = {});

  KvStore* const kv_;
  const Source watched_;
  Mutex mu_;
  std::map<std::string, Cached> cache_ GUARDED_BY(mu_);
  std::atomic<uint64_t> conflicts_{0};
};

}  // namespace warren::cluster
