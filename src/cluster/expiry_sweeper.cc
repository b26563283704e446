#include "cluster/expiry_sweeper.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "cluster/idle_index.h"
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
  return n + (end_if_idle_ ? SweepIdle(now_ms) : 0);
}

int ExpirySweeper::SweepIdle(int64_t now_ms) {
  RangeRequest req;
  req.key = keys::kIdle;
  req.range_end = keys::IdleUpTo(now_ms);
  req.limit = kPerPass;
  auto due = kv_->Range(req);
  if (!due.ok()) {
    spdlog::warn("expiry sweeper {}: list idle deadlines: {}", me_, due.status().ToString());
    return 0;
  }
  if (due->kvs.empty()) return 0;
  // Each entry's sandbox's current deadline, kReadsPerTxn to a read (etcd refuses a
  // transaction of more than 128 operations).
  std::vector<RangeResult> current;
  for (size_t begin = 0; begin < due->kvs.size(); begin += kReadsPerTxn) {
    Txn read;
    for (size_t i = begin; i < std::min(due->kvs.size(), begin + kReadsPerTxn); ++i)
      read.success.push_back(TxnOp::Get(keys::IdleAt(keys::ExpiryId(due->kvs[i].key))));
    auto got = kv_->Commit(read);
    if (!got.ok() || got->gets.size() != read.success.size()) {
      spdlog::warn("expiry sweeper {}: read idle deadlines: {}", me_,
                   got.ok() ? "short answer" : got.status().ToString());
      return 0;
    }
    for (auto& g : got->gets) current.push_back(std::move(g));
  }
  int n = 0;
  for (size_t i = 0; i < due->kvs.size(); ++i) {
    const KeyValue& item = due->kvs[i];
    const auto& at = current[i].kvs;
    const std::string id = keys::ExpiryId(item.key);
    // A later use moved the deadline, or the sandbox went: the entry is stale.
    if (at.empty() || at[0].value != keys::IdleDeadlineOf(item.key)) {
      (void)kv_->Delete(item.key);
      continue;
    }
    auto ended = end_if_idle_(id);
    if (!ended.ok() && ended.status().code() != Code::kNotFound) {
      spdlog::warn("expiry sweeper {}: end idle {}: {}", me_, id, ended.status().ToString());
      continue;  // tried again next pass
    }
    if (ended.ok() && !*ended) {
      // Busy: a running command is use. The next deadline counts from now.
      const int64_t timeout_ms = std::atoll(item.value.c_str());
      if (timeout_ms > 0) {
        auto moved = kv_->Commit(IdleMoveTxn(id, IdleDeadlineMs(now_ms, timeout_ms), timeout_ms));
        if (!moved.ok()) continue;  // the entry stays: tried again next pass
      }
    } else if (ended.ok()) {
      ++n;
    } else {
      (void)kv_->Delete(keys::IdleAt(id));  // not_found: the record went without it
    }
    (void)kv_->Delete(item.key);
  }
  return n;
}

}  // namespace warren::cluster
