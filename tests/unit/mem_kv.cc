#include "mem_kv.h"

#include <algorithm>

namespace warren::cluster {

namespace {
bool InRange(const std::string& k, const std::string& key, const std::string& end) {
  if (end.empty()) return k == key;
  if (end == std::string(1, '\0')) return k >= key;
  return k >= key && k < end;
}
}  // namespace

struct MemKv::WatchState {
  std::string key, range_end;
  int64_t next = 0;
  WatchCallbacks callbacks;
  bool ended = false;
};

class MemKv::MemWatch : public Watch {
 public:
  MemWatch(MemKv* kv, WatchState* w) : kv_(kv), w_(w) {}
  ~MemWatch() override { kv_->Unregister(w_); }

 private:
  MemKv* const kv_;
  WatchState* const w_;
};

MemKv::MemKv() {
  dispatcher_ = std::thread([this] { Dispatch(); });
}

MemKv::~MemKv() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.notify_all();
  dispatcher_.join();
}

Status MemKv::Check(const std::string& op, const std::string& key) {
  if (available_) return Status::Ok();
  return Status(Code::kUnavailable, "etcd " + op, key, "etcd cannot be reached (MemKv is down)");
}

int64_t MemKv::revision() {
  MutexLock lock(&mu_);
  return revision_;
}

RangeResult MemKv::RangeLocked(const RangeRequest& req) {
  RangeResult r;
  r.revision = revision_;
  for (auto it = kvs_.lower_bound(req.key); it != kvs_.end(); ++it) {
    if (!InRange(it->first, req.key, req.range_end)) break;
    ++r.count;
    if (req.count_only || (req.limit > 0 && static_cast<int64_t>(r.kvs.size()) >= req.limit)) {
      continue;
    }
    KeyValue kv = it->second;
    if (req.keys_only) kv.value.clear();
    r.kvs.push_back(std::move(kv));
  }
  r.more = req.limit > 0 && r.count > req.limit;
  return r;
}

Result<RangeResult> MemKv::Range(const RangeRequest& req) {
  MutexLock lock(&mu_);
  WARREN_RETURN_IF_ERROR(Check("range", req.key));
  if (req.revision > 0 && req.revision != revision_)
    return Invalid("MemKv reads only the newest revision", req.key);
  return RangeLocked(req);
}

// At revision_ (the caller has moved it on for this write).
void MemKv::PutLocked(const std::string& key, const std::string& value, int64_t lease) {
  KeyValue& kv = kvs_[key];
  if (kv.version == 0) {
    kv.key = key;
    kv.create_revision = revision_;
  }
  kv.value = value;
  kv.mod_revision = revision_;
  ++kv.version;
  kv.lease = lease;
  history_.push_back({revision_, {WatchEvent::Type::kPut, kv}});
}

int64_t MemKv::DeleteLocked(const std::string& key, const std::string& range_end) {
  int64_t n = 0;
  for (auto it = kvs_.lower_bound(key); it != kvs_.end();) {
    if (!InRange(it->first, key, range_end)) break;
    KeyValue gone;
    gone.key = it->first;
    gone.mod_revision = revision_;
    history_.push_back({revision_, {WatchEvent::Type::kDelete, gone}});
    it = kvs_.erase(it);
    ++n;
  }
  return n;
}

Result<int64_t> MemKv::Put(const std::string& key, const std::string& value, int64_t lease) {
  int64_t rev;
  {
    MutexLock lock(&mu_);
    WARREN_RETURN_IF_ERROR(Check("put", key));
    if (lease != 0 && !leases_.count(lease))
      return Status(Code::kNotFound, "etcd put", key, "etcdserver: requested lease not found");
    rev = ++revision_;  // this write's, not whatever a later writer has made it since
    PutLocked(key, value, lease);
    writes_.fetch_add(1);
  }
  changed_.notify_all();
  return rev;
}

Result<int64_t> MemKv::Delete(const std::string& key, const std::string& range_end) {
  int64_t n = 0;
  {
    MutexLock lock(&mu_);
    WARREN_RETURN_IF_ERROR(Check("delete", key));
    writes_.fetch_add(1);
    ++revision_;
    n = DeleteLocked(key, range_end);
    if (n == 0) --revision_;  // etcd: deleting nothing makes no revision
  }
  changed_.notify_all();
  return n;
}

bool MemKv::Holds(const Compare& c) {
  if (!c.range_end.empty()) {
    // etcd: every key of the range must hold; an empty range compares as one missing key.
    auto first = kvs_.lower_bound(c.key);
    auto last = c.range_end == std::string(1, '\0') ? kvs_.end() : kvs_.lower_bound(c.range_end);
    if (first == last) return HoldsFor(c, nullptr);
    for (auto it = first; it != last; ++it)
      if (!HoldsFor(c, &it->second)) return false;
    return true;
  }
  auto it = kvs_.find(c.key);
  return HoldsFor(c, it == kvs_.end() ? nullptr : &it->second);
}

bool MemKv::HoldsFor(const Compare& c, const KeyValue* found) {
  const KeyValue missing;
  const KeyValue& kv = found ? *found : missing;
  if (c.target == Compare::Target::kValue) {
    if (!found) return false;  // etcd: a value comparison on a missing key fails
    int cmp = kv.value.compare(c.value);
    switch (c.op) {
      case Compare::Op::kEqual:
        return cmp == 0;
      case Compare::Op::kNotEqual:
        return cmp != 0;
      case Compare::Op::kGreater:
        return cmp > 0;
      case Compare::Op::kLess:
        return cmp < 0;
    }
  }
  int64_t v = 0;
  switch (c.target) {
    case Compare::Target::kVersion:
      v = kv.version;
      break;
    case Compare::Target::kCreate:
      v = kv.create_revision;
      break;
    case Compare::Target::kMod:
      v = kv.mod_revision;
      break;
    case Compare::Target::kLease:
      v = kv.lease;
      break;
    case Compare::Target::kValue:
      break;
  }
  switch (c.op) {
    case Compare::Op::kEqual:
      return v == c.number;
    case Compare::Op::kNotEqual:
      return v != c.number;
    case Compare::Op::kGreater:
      return v > c.number;
    case Compare::Op::kLess:
      return v < c.number;
  }
  return false;
}

Result<TxnResult> MemKv::Commit(const Txn& txn) {
  TxnResult r;
  {
    MutexLock lock(&mu_);
    WARREN_RETURN_IF_ERROR(Check("txn", txn.compare.empty() ? "" : txn.compare[0].key));
    // As etcd with its default --max-txn-ops: code that builds large transactions must cut them.
    if (txn.compare.size() > 128 || txn.success.size() > 128 || txn.failure.size() > 128)
      return Invalid("etcd txn: etcdserver: too many operations in txn request");
    r.succeeded = std::all_of(txn.compare.begin(), txn.compare.end(),
                              [&](const Compare& c) NO_THREAD_SAFETY_ANALYSIS { return Holds(c); });
    const auto& ops = r.succeeded ? txn.success : txn.failure;
    for (const TxnOp& op : ops) {
      if (op.kind == TxnOp::Kind::kPut && op.lease != 0 && !leases_.count(op.lease))
        return Status(Code::kNotFound, "etcd txn", op.key, "etcdserver: requested lease not found");
    }
    const bool writes = std::any_of(ops.begin(), ops.end(),
                                    [](const TxnOp& op) { return op.kind != TxnOp::Kind::kGet; });
    if (writes) {
      ++revision_;
      writes_.fetch_add(1);
    }
    // Reads in a transaction see the writes before them in it, as in etcd.
    for (const TxnOp& op : ops) {
      switch (op.kind) {
        case TxnOp::Kind::kPut:
          PutLocked(op.key, op.value, op.lease);
          break;
        case TxnOp::Kind::kDelete:
          DeleteLocked(op.key, op.range_end);
          break;
        case TxnOp::Kind::kGet:
          r.gets.push_back(RangeLocked({.key = op.key, .range_end = op.range_end}));
          break;
      }
    }
    r.revision = revision_;
    for (auto& g : r.gets) g.revision = revision_;
  }
  changed_.notify_all();
  return r;
}

Result<int64_t> MemKv::GrantLease(int64_t ttl_s) {
  MutexLock lock(&mu_);
  WARREN_RETURN_IF_ERROR(Check("grant lease", ""));
  const int64_t id = next_lease_++;
  leases_[id] = {ttl_s, now_ + static_cast<double>(ttl_s)};
  return id;
}

Result<int64_t> MemKv::KeepAlive(int64_t lease) {
  MutexLock lock(&mu_);
  WARREN_RETURN_IF_ERROR(Check("keep lease alive", std::to_string(lease)));
  auto it = leases_.find(lease);
  if (it == leases_.end()) return NotFound("lease", std::to_string(lease));
  it->second.deadline = now_ + static_cast<double>(it->second.ttl);
  return it->second.ttl;
}

void MemKv::RevokeLocked(int64_t lease) {
  leases_.erase(lease);
  std::vector<std::string> keys;
  for (const auto& [k, kv] : kvs_)
    if (kv.lease == lease) keys.push_back(k);
  if (keys.empty()) return;
  ++revision_;
  for (const auto& k : keys) DeleteLocked(k, "");
}

Status MemKv::RevokeLease(int64_t lease) {
  {
    MutexLock lock(&mu_);
    WARREN_RETURN_IF_ERROR(Check("revoke lease", std::to_string(lease)));
    if (!leases_.count(lease))
      return Status(Code::kNotFound, "etcd revoke lease", std::to_string(lease),
                    "etcdserver: requested lease not found");
    RevokeLocked(lease);
  }
  changed_.notify_all();
  return Status::Ok();
}

void MemKv::Advance(double seconds) {
  {
    MutexLock lock(&mu_);
    now_ += seconds;
    std::vector<int64_t> expired;
    for (const auto& [id, l] : leases_)
      if (l.deadline <= now_) expired.push_back(id);
    for (int64_t id : expired) RevokeLocked(id);
  }
  changed_.notify_all();
}

void MemKv::Compact(int64_t revision) {
  MutexLock lock(&mu_);
  compacted_ = std::max(compacted_, revision);
  while (!history_.empty() && history_.front().revision < compacted_) history_.pop_front();
}

void MemKv::SetAvailable(bool available) {
  MutexLock lock(&mu_);
  available_ = available;
}

Result<std::unique_ptr<Watch>> MemKv::WatchRange(const std::string& key,
                                                 const std::string& range_end,
                                                 int64_t start_revision, WatchCallbacks callbacks) {
  auto* w = new WatchState{key, range_end, 0, std::move(callbacks)};
  {
    MutexLock lock(&mu_);
    if (!available_) {
      delete w;
      return Status(Code::kUnavailable, "etcd watch", key, "etcd cannot be reached");
    }
    w->next = start_revision > 0 ? start_revision : revision_ + 1;
    watches_.push_back(w);
  }
  changed_.notify_all();
  return std::unique_ptr<Watch>(new MemWatch(this, w));
}

void MemKv::Unregister(WatchState* w) {
  MutexLock lock(&mu_);
  while (delivering_ == w) lock.Wait(changed_);
  watches_.erase(std::remove(watches_.begin(), watches_.end(), w), watches_.end());
  delete w;
}

void MemKv::Drain() {
  MutexLock lock(&mu_);
  while (dispatched_ < revision_ || delivering_ != nullptr ||
         std::any_of(watches_.begin(), watches_.end(),
                     [&](WatchState* w)
                         NO_THREAD_SAFETY_ANALYSIS { return !w->ended && w->next <= revision_; }))
    lock.Wait(changed_);
}

void MemKv::Dispatch() {
  MutexLock lock(&mu_);
  while (!stop_) {
    bool any = false;
    for (size_t i = 0; i < watches_.size(); ++i) {
      WatchState* w = watches_[i];
      if (w->ended || w->next > revision_) continue;
      any = true;
      std::vector<WatchEvent> events;
      Status end;
      if (w->next < compacted_) {
        w->ended = true;
        end = Status(Code::kConflict, "etcd watch", w->key, "the start revision was compacted");
      } else {
        for (const Event& e : history_)
          if (e.revision >= w->next && InRange(e.event.kv.key, w->key, w->range_end))
            events.push_back(e.event);
        w->next = revision_ + 1;
      }
      if (events.empty() && end.ok()) continue;
      delivering_ = w;
      lock.Unlock();
      if (!end.ok()) {
        if (w->callbacks.on_end) w->callbacks.on_end(end);
      } else if (w->callbacks.on_events) {
        w->callbacks.on_events(events);
      }
      lock.Lock();
      delivering_ = nullptr;
      changed_.notify_all();
      break;  // watches_ may have changed while unlocked: look again
    }
    if (any) continue;
    dispatched_ = revision_;
    changed_.notify_all();
    lock.Wait(changed_);
  }
}

}  // namespace warren::cluster
