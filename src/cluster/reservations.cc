#include "cluster/reservations.h"

#include <algorithm>

#include "cluster/keys.h"

namespace warren::cluster {

using nlohmann::json;

namespace {
constexpr int kMaxAttempts = 64;

// How many sandboxes of `each` fit on top of `alloc` within `limit`.
int64_t RoomFor(const Allocation& alloc, const Resources& each, const Resources& limit) {
  auto room = [](int64_t lim, int64_t used, int64_t one) -> int64_t {
    if (one <= 0) return INT64_MAX;
    return lim <= used ? 0 : (lim - used) / one;
  };
  return std::min({room(limit.cpu_milli, alloc.reserved.cpu_milli, each.cpu_milli),
                   room(limit.memory_mb, alloc.reserved.memory_mb, each.memory_mb),
                   room(limit.disk_mb, alloc.reserved.disk_mb, each.disk_mb)});
}
}  // namespace

Result<Reservations::Cached> Reservations::Load(const std::string& node) {
  std::optional<std::pair<Allocation, int64_t>> seen;
  if (watched_) seen = watched_(node);
  {
    MutexLock lock(&mu_);
    auto it = cache_.find(node);
    if (it != cache_.end() || seen) {
      Cached& c = cache_[node];
      if (seen && seen->second > c.mod_revision) c = {seen->first, seen->second};
      if (c.mod_revision != 0 || it != cache_.end()) return c;
    }
  }
  auto got = kv_->Range({.key = keys::Alloc(node)});
  if (!got.ok()) return got.status();
  Remember(node, *got);
  MutexLock lock(&mu_);
  return cache_[node];
}

void Reservations::Remember(const std::string& node, const RangeResult& got) {
  Cached c;
  if (!got.kvs.empty()) {
    auto parsed = ParseAllocation(json::parse(got.kvs[0].value, nullptr, false));
    // A record this version cannot read is left as it is: reservations on it fail loudly in
    // Apply rather than overwrite it with a sum that forgot what it held.
    c.alloc = parsed.ok() ? *parsed : Allocation{};
    c.mod_revision = parsed.ok() ? got.kvs[0].mod_revision : -1;
  }
  MutexLock lock(&mu_);
  cache_[node] = c;
}

std::optional<std::pair<Allocation, int64_t>> Reservations::LastSeen(const std::string& node) {
  MutexLock lock(&mu_);
  auto it = cache_.find(node);
  if (it == cache_.end() || it->second.mod_revision <= 0) return std::nullopt;
  return std::make_pair(it->second.alloc, it->second.mod_revision);
}

Result<Allocation> Reservations::Read(const std::string& node) {
  auto got = kv_->Range({.key = keys::Alloc(node)});
  if (!got.ok()) return got.status();
  Remember(node, *got);
  MutexLock lock(&mu_);
  return cache_[node].alloc;
}

Result<int64_t> Reservations::Apply(const std::string& node, const Plan& plan,
                                    const ExtraOps& extra, const std::vector<Compare>& also) {
  const std::string key = keys::Alloc(node);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Cached cur = WARREN_TRY(Load(node));
    if (cur.mod_revision < 0)
      return Internal("reserve", node, "the node's allocation record cannot be read");
    Allocation next = cur.alloc;
    const int64_t n = plan(cur.alloc, &next);
    if (n <= 0) return int64_t{0};
    Txn txn;
    txn.compare.push_back(Compare::ModIs(key, cur.mod_revision));
    for (const Compare& c : also) txn.compare.push_back(c);
    txn.success.push_back(TxnOp::Put(key, ToJson(next).dump()));
    if (extra)
      for (TxnOp& op : extra(n)) txn.success.push_back(std::move(op));
    txn.failure.push_back(TxnOp::Get(key));
    auto r = kv_->Commit(txn);
    if (!r.ok()) {
      // The outcome may be unknown: forget the cached sum, the next try reads it.
      MutexLock lock(&mu_);
      cache_.erase(node);
      return r.status();
    }
    if (r->succeeded) {
      MutexLock lock(&mu_);
      cache_[node] = {next, r->revision};
      return n;
    }
    conflicts_.fetch_add(1, std::memory_order_relaxed);
    if (!r->gets.empty()) Remember(node, r->gets[0]);
    if (!also.empty()) {
      // Which comparison failed? An unchanged allocation means one of `also`.
      const int64_t now =
          !r->gets.empty() && !r->gets[0].kvs.empty() ? r->gets[0].kvs[0].mod_revision : 0;
      if (now == cur.mod_revision)
        return Status(Code::kConflict, "release", node, "what it depends on changed meanwhile");
    }
  }
  return Status(Code::kUnavailable, "reserve", node,
                "the node's reservations kept changing; try again")
      .WithRetryAfter(1);
}

Result<int64_t> Reservations::Reserve(const std::string& node, const Resources& each, int64_t count,
                                      const Resources& limit, bool partial, const ExtraOps& extra) {
  auto n = Apply(
      node,
      [&](const Allocation& cur, Allocation* next) {
        const int64_t room = RoomFor(cur, each, limit);
        const int64_t k = std::min(count, partial || room >= count ? room : 0);
        next->reserved += each * k;
        next->sandboxes += k;
        return k;
      },
      extra);
  if (!n.ok()) return n;
  if (*n == 0 && !partial)
    return Status(Code::kQuota, "reserve", node, "the node has no room for the sandbox");
  return n;
}

Result<int64_t> Reservations::ReserveEach(const std::string& node,
                                          const std::vector<Resources>& items,
                                          const Resources& limit, const ExtraOps& extra) {
  return Apply(
      node,
      [&](const Allocation& cur, Allocation* next) {
        int64_t k = 0;
        for (const Resources& r : items) {
          Allocation more = *next;
          more.reserved += r;
          ++more.sandboxes;
          if (more.reserved.cpu_milli > limit.cpu_milli ||
              more.reserved.memory_mb > limit.memory_mb || more.reserved.disk_mb > limit.disk_mb)
            break;
          *next = more;
          ++k;
        }
        (void)cur;
        return k;
      },
      extra);
}

Status Reservations::Release(const std::string& node, const Resources& each, int64_t count,
                             const std::vector<TxnOp>& extra, const std::vector<Compare>& also) {
  auto n = Apply(
      node,
      [&](const Allocation&, Allocation* next) {
        next->reserved -= each * count;
        next->sandboxes -= count;
        // Never below zero (a release repeated after a lost answer).
        next->sandboxes = std::max<int64_t>(next->sandboxes, 0);
        next->reserved.cpu_milli = std::max<int64_t>(next->reserved.cpu_milli, 0);
        next->reserved.memory_mb = std::max<int64_t>(next->reserved.memory_mb, 0);
        next->reserved.disk_mb = std::max<int64_t>(next->reserved.disk_mb, 0);
        return count;
      },
      [&](int64_t) { return extra; }, also);
  return n.status();
}

}  // namespace warren::cluster
