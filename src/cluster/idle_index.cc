#include "cluster/idle_index.h"

#include <algorithm>
#include <cmath>

#include "cluster/keys.h"

namespace warren::cluster {

int64_t IdleSlackMs(int64_t timeout_ms) {
  return std::clamp<int64_t>(timeout_ms / 4, 1'000, 60'000);
}

int64_t IdleDeadlineMs(int64_t used_ms, int64_t timeout_ms) {
  return used_ms + timeout_ms + IdleSlackMs(timeout_ms);
}

int64_t IdleTimeoutMsOf(const nlohmann::json& sandbox) {
  auto it = sandbox.find("idle_timeout_s");
  if (it == sandbox.end() || !it->is_number() || it->get<double>() <= 0) return 0;
  return std::llround(it->get<double>() * 1000);
}

std::vector<TxnOp> IdleInsertOps(const std::string& id, int64_t deadline_ms, int64_t timeout_ms) {
  return {TxnOp::Put(keys::IdleAt(id), keys::ExpiryMs(deadline_ms)),
          TxnOp::Put(keys::Idle(deadline_ms, id), std::to_string(timeout_ms))};
}

Txn IdleMoveTxn(const std::string& id, int64_t deadline_ms, int64_t timeout_ms) {
  Txn txn;
  // Fixed-width digits compare as numbers; a missing idle-at (the sandbox is gone, or has no
  // idle timeout) fails the comparison, as etcd's value comparisons do.
  txn.compare = {Compare{keys::IdleAt(id), Compare::Target::kValue, Compare::Op::kLess, 0,
                         keys::ExpiryMs(deadline_ms)}};
  txn.success = IdleInsertOps(id, deadline_ms, timeout_ms);
  return txn;
}

}  // namespace warren::cluster
