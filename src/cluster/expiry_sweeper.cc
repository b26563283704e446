#include "cluster/expiry_sweeper.h"

#include <spdlog/spdlog.h>

#include "cluster/keys.h"

namespace warren::cluster {

ExpirySweeper::ExpirySweeper(KvStore* kv, std::string me, std::function<int64_t()> lease,
                             std::function<Status(const std::string&)> expire)
    : kv_(kv), me_(std::move(me)), lease_(std::move(lease)), expire_(std::move(expire)) {}

bool ExpirySweeper::Lead() {
  const int64_t lease = lease_();
  if (lease == 0) return false;
  // Ours if no one holds it; else whoever does keeps it until their lease ends. Held under
  // the lease we have now: after our presence was granted again, the old key went with the
  // old lease, so we take it afresh.
  Txn txn;
  txn.compare = {Compare::Missing(keys::kExpiryLeader)};
  txn.success = {TxnOp::Put(keys::kExpiryLeader, me_, lease)};
  txn.failure = {TxnOp::Get(keys::kExpiryLeader)};
  auto r = kv_->Commit(txn);
  if (!r.ok()) {
    spdlog::warn("expiry sweeper {}: {}", me_, r.status().ToString());
    return false;
  }
  bool mine = r->succeeded;
  if (!mine && !r->gets.empty() && !r->gets[0].kvs.empty()) {
    const KeyValue& holder = r->gets[0].kvs[0];
    mine = holder.value == me_ && holder.lease == lease;
  }
  if (mine != leading_.exchange(mine))
    spdlog::info("expiry sweeper {}: {}", me_, mine ? "leading" : "no longer leading");
  return mine;
}

int ExpirySweeper::Sweep(int64_t now_ms) {
  if (!Lead()) return 0;
  RangeRequest req;
  req.key = keys::kExpiry;
  req.range_end = keys::ExpiryUpTo(now_ms);
  req.limit = kPerPass;
  auto due = kv_->Range(req);
  if (!due.ok()) {
    spdlog::warn("expiry sweeper {}: list what is due: {}", me_, due.status().ToString());
    return 0;
  }
  int n = 0;
  for (const KeyValue& item : due->kvs) {
    const std::string id = keys::ExpiryId(item.key);
    Status st = expire_(id);
    if (st.ok()) {
      ++n;
    } else if (st.code() == Code::kNotFound) {
      // The record went without its index entry (an older version's removal): drop it.
      (void)kv_->Delete(item.key);
    } else {
      // The sandbox's node out of reach, etcd away: tried again next pass.
      spdlog::warn("expiry sweeper {}: expire {}: {}", me_, id, st.ToString());
    }
  }
  return n;
}

}  // namespace warren::cluster
