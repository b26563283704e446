#include "server/quota.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "server/state_store.h"

namespace warren::server {
namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

std::string Fmt(double v) {
  char b[32];
  snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

ShareLimits LimitsOf(const Quotas& q) { return {q.max_sandboxes, q.max_cpu, q.max_memory_mb}; }

void QuotaTracker::CountSharesIn(StateStore* store) {
  MutexLock lock(&mu_);
  counted_by_ = store;
}

Status QuotaTracker::Reserve(const Principal& who, double cpu, int64_t memory_mb) {
  const Quotas& q = who.quotas;
  MutexLock lock(&mu_);
  Use& u = use_[who.name];
  if (!counted_by_)
    WARREN_RETURN_IF_ERROR(
        AdmitShare(who.name, LimitsOf(q), {u.sandboxes, u.cpu, u.memory_mb}, cpu, memory_mb));
  if (q.create_rate > 0) {
    const double burst = std::max(1.0, q.create_rate), now = Now();
    if (u.bucket < 0) u.bucket = burst;
    u.bucket = std::min(burst, u.bucket + (now - u.refilled_at) * q.create_rate);
    u.refilled_at = now;
    if (u.bucket < 1)
      return Status(Code::kQuota, "create sandbox", who.name,
                    "create rate limit of " + Fmt(q.create_rate) + "/s reached; retry shortly")
          .WithRetryAfter(static_cast<int>(std::ceil((1 - u.bucket) / q.create_rate)));
    u.bucket -= 1;
  }
  if (counted_by_) return Status::Ok();
  u.sandboxes += 1;
  u.cpu += cpu;
  u.memory_mb += memory_mb;
  return Status::Ok();
}

Status QuotaTracker::ReserveCalls(const Principal& who, int64_t n) {
  const Quotas& q = who.quotas;
  if (q.max_calls > 0 && n > q.max_calls)
    return Invalid("a batch of " + std::to_string(n) +
                   " calls is more than this token's max_calls (" + std::to_string(q.max_calls) +
                   ") would ever let run; split it");
  MutexLock lock(&mu_);
  Use& u = use_[who.name];
  if (q.max_calls > 0 && u.calls + n > q.max_calls)
    return Status(Code::kQuota, "call", who.name,
                  "quota of " + std::to_string(q.max_calls) + " calls at once reached (" +
                      std::to_string(u.calls) + " running)")
        .WithRetryAfter(1);
  if (q.call_rate > 0) {
    const double burst = std::max(1.0, q.call_rate), now = Now();
    if (u.call_bucket < 0 && u.call_refilled_at == 0) u.call_bucket = burst;
    u.call_bucket = std::min(burst, u.call_bucket + (now - u.call_refilled_at) * q.call_rate);
    u.call_refilled_at = now;
    if (u.call_bucket < 1)
      return Status(Code::kQuota, "call", who.name,
                    "call rate limit of " + Fmt(q.call_rate) + "/s reached")
          .WithRetryAfter(static_cast<int>(std::ceil((1 - u.call_bucket) / q.call_rate)));
    u.call_bucket -= static_cast<double>(n);
  }
  u.calls += n;
  return Status::Ok();
}

void QuotaTracker::ReleaseCalls(const std::string& owner, int64_t n) {
  MutexLock lock(&mu_);
  Use& u = use_[owner];
  u.calls = std::max<int64_t>(0, u.calls - n);
}

int64_t QuotaTracker::CallsRunning() {
  MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [owner, u] : use_) n += u.calls;
  return n;
}

void QuotaTracker::Release(const std::string& owner, double cpu, int64_t memory_mb) {
  MutexLock lock(&mu_);
  if (counted_by_) return;  // the record's removal or failure gave it back in the store
  Use& u = use_[owner];
  u.sandboxes = std::max<int64_t>(0, u.sandboxes - 1);
  u.cpu = std::max(0.0, u.cpu - cpu);
  u.memory_mb = std::max<int64_t>(0, u.memory_mb - memory_mb);
}

void QuotaTracker::Count(const std::vector<SandboxRecord>& sandboxes) {
  MutexLock lock(&mu_);
  if (counted_by_) return;
  for (const auto& sb : sandboxes) {
    if (!HoldsShare(StateName(sb.state))) continue;
    Use& u = use_[sb.owner];
    u.sandboxes += 1;
    u.cpu += sb.spec.cpu;
    u.memory_mb += static_cast<int64_t>(sb.spec.memory_mb);
  }
}

nlohmann::json QuotaTracker::Usage(const std::string& owner) {
  StateStore* store;
  {
    MutexLock lock(&mu_);
    store = counted_by_;
  }
  if (store) {
    auto share = store->ShareOf(owner);
    if (!share.ok()) return {{"error", share.status().ToString()}};
    return {{"sandboxes", share->sandboxes}, {"cpu", share->cpu}, {"memory_mb", share->memory_mb}};
  }
  MutexLock lock(&mu_);
  const Use& u = use_[owner];
  return {{"sandboxes", u.sandboxes}, {"cpu", u.cpu}, {"memory_mb", u.memory_mb}};
}

}  // namespace warren::server
