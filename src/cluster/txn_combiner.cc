#include "cluster/txn_combiner.h"

#include <set>

namespace warren::cluster {

bool TxnCombiner::Combinable(const Txn& txn) {
  if (txn.compare.size() > kMaxOps || txn.success.size() > kMaxOps) return false;
  for (const TxnOp& op : txn.success)
    if (op.kind == TxnOp::Kind::kGet || !op.range_end.empty()) return false;
  return true;
}

void TxnCombiner::CommitGroup(const std::vector<Item*>& group) {
  commits_.fetch_add(1, std::memory_order_relaxed);
  members_.fetch_add(group.size(), std::memory_order_relaxed);
  if (group.size() == 1) {
    group[0]->result = kv_->Commit(*group[0]->txn);
    return;
  }
  Txn all;
  for (const Item* it : group) {
    all.compare.insert(all.compare.end(), it->txn->compare.begin(), it->txn->compare.end());
    all.success.insert(all.success.end(), it->txn->success.begin(), it->txn->success.end());
  }
  auto r = kv_->Commit(all);
  if (!r.ok()) {
    // Not known whether it was applied (a lost answer is not repeated, etcd_client.h): each
    // caller hears so, as it would have of its own transaction.
    for (Item* it : group) it->result = r.status();
    return;
  }
  if (r->succeeded) {
    for (Item* it : group) it->result = TxnResult{true, r->revision, {}};
    return;
  }
  // Some member's comparison failed and nothing was written: each on its own, for its own
  // answer.
  split_.fetch_add(1, std::memory_order_relaxed);
  for (Item* it : group) {
    commits_.fetch_add(1, std::memory_order_relaxed);
    it->result = kv_->Commit(*it->txn);
  }
}

Result<TxnResult> TxnCombiner::Commit(const Txn& txn) {
  Item me{&txn};
  MutexLock lock(&mu_);
  waiting_.push_back(&me);
  while (!me.done) {
    if (busy_) {
      lock.Wait(done_);
      continue;
    }
    // Commit what is queued (this item, or earlier ones first): from the front, as many as
    // fit in one transaction, keeping the order of arrival for those left.
    busy_ = true;
    std::vector<Item*> group;
    std::set<std::string> written;
    size_t compares = 0, ops = 0;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const Txn& t = *(*it)->txn;
      const bool alone = !Combinable(t);
      if (!group.empty() &&
          (alone || compares + t.compare.size() > kMaxOps || ops + t.success.size() > kMaxOps)) {
        if (alone) break;
        ++it;
        continue;
      }
      bool overlaps = false;
      for (const TxnOp& op : t.success) overlaps = overlaps || written.count(op.key);
      if (overlaps) {
        ++it;
        continue;
      }
      for (const TxnOp& op : t.success) written.insert(op.key);
      compares += t.compare.size();
      ops += t.success.size();
      group.push_back(*it);
      it = waiting_.erase(it);
      if (alone) break;
    }
    lock.Unlock();
    CommitGroup(group);
    lock.Lock();
    for (Item* it : group) it->done = true;
    busy_ = false;
    done_.notify_all();
  }
  return std::move(me.result);
}

}  // namespace warren::cluster
