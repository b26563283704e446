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

namespace {

// Whether a comparison looks at `key` (its key, or its range [key, range_end); a range_end of
// "\0" is every key from `key` on).
bool Covers(const Compare& c, const std::string& key) {
  if (c.range_end.empty()) return key == c.key;
  if (key < c.key) return false;
  return c.range_end == std::string(1, '\0') || key < c.range_end;
}

}  // namespace

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
    std::vector<const Compare*> guards;  // every member's comparisons
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
      // Members share one evaluation of every comparison, made before any member writes: one
      // must not write what another compares (two creates of one owner, each checking that
      // no share of the owner was written since it summed them, would both pass and both
      // be written), nor write a key another writes.
      bool overlaps = false;
      for (const TxnOp& op : t.success) {
        overlaps = overlaps || written.count(op.key);
        for (const Compare* g : guards) overlaps = overlaps || Covers(*g, op.key);
      }
      for (const Compare& c : t.compare)
        for (const std::string& w : written) overlaps = overlaps || Covers(c, w);
      if (overlaps) {
        ++it;
        continue;
      }
      for (const TxnOp& op : t.success) written.insert(op.key);
      for (const Compare& c : t.compare) guards.push_back(&c);
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
