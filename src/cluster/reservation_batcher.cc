#include "cluster/reservation_batcher.h"

namespace warren::cluster {

void ReservationBatcher::CommitGroup(const std::string& node, std::vector<Item*>& group) {
  std::vector<Resources> items;
  items.reserve(group.size());
  for (const Item* it : group) items.push_back(it->each);
  // Copied, not moved: a transaction that lost a race is built again from them.
  auto n = res_->ReserveEach(node, items, group.front()->limit, [&](int64_t k) {
    std::vector<TxnOp> ops;
    for (int64_t i = 0; i < k; ++i)
      for (const TxnOp& op : group[i]->ops) ops.push_back(op);
    return ops;
  });
  groups_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < group.size(); ++i) {
    if (!n.ok()) {
      group[i]->result = n.status();
    } else if (static_cast<int64_t>(i) < *n) {
      group[i]->result = Status::Ok();
      items_.fetch_add(1, std::memory_order_relaxed);
    } else {
      group[i]->result = Status(Code::kQuota, "reserve", node, "the node has no room for it");
    }
  }
}

Status ReservationBatcher::Reserve(const std::string& node, const Resources& each,
                                   const Resources& limit, std::vector<TxnOp> ops) {
  if (ops.size() + 1 > kMaxOps)
    return Invalid("too many writes for one reservation transaction", node);
  Item me{each, limit, std::move(ops)};
  MutexLock lock(&mu_);
  NodeQueue& q = queues_[node];  // std::map: the reference outlives later insertions
  q.waiting.push_back(&me);
  while (!me.done) {
    if (q.busy) {
      lock.Wait(done_);
      continue;
    }
    // Commit whatever is queued for this node (this item, or earlier ones first).
    q.busy = true;
    std::vector<Item*> group;
    size_t ops_count = 0;
    while (!q.waiting.empty()) {
      Item* next = q.waiting.front();
      if (!group.empty() &&
          (ops_count + next->ops.size() > kMaxOps - 1 || !(next->limit == group.front()->limit)))
        break;
      ops_count += next->ops.size();
      group.push_back(next);
      q.waiting.pop_front();
    }
    lock.Unlock();
    CommitGroup(node, group);
    lock.Lock();
    for (Item* it : group) it->done = true;
    q.busy = false;
    done_.notify_all();
  }
  return me.result;
}

}  // namespace warren::cluster
