// Per-principal quotas: live sandboxes, their CPU and memory, and a create-rate token bucket.
// A create reserves before it starts and releases if it fails, so concurrent creates can never
// together overshoot a limit. A sandbox gives its share back once: when it fails or is lost,
// or when a record that still held it is removed (the caller releases only after the write
// that made it so succeeded, so the record decides, not a set kept here).
//
// In a cluster the store counts shares (StateStore::CountsShares): the limits on live
// sandboxes are checked where the record is inserted, across every API server, and this
// tracker keeps only what is per replica (the rate buckets and fncall calls).
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "server/auth.h"
#include "server/sandbox_record.h"
#include "server/shares.h"

namespace warren::server {

class StateStore;

ShareLimits LimitsOf(const Quotas& q);

class QuotaTracker {
 public:
  // Shares are counted by `store` from now on (a cluster's): Reserve checks only the rate,
  // Release does nothing, Usage asks the store.
  void CountSharesIn(StateStore* store);
  // Room for one more sandbox of (cpu, memory_mb) owned by `who`, or a `quota` error naming
  // the limit.
  Status Reserve(const Principal& who, double cpu, int64_t memory_mb);
  void Release(const std::string& owner, double cpu, int64_t memory_mb);
  // Room for `n` more fncall calls of `who` (a call, or a batch of n): its concurrency
  // (max_calls) and rate (call_rate: a token bucket of burst max(1, rate); a batch needs one
  // token and may leave the bucket in debt, so a batch larger than the burst is not refused
  // forever) quotas. A refusal is a `quota` status carrying when to retry; a batch larger than
  // max_calls is `invalid` (it could never run).
  Status ReserveCalls(const Principal& who, int64_t n);
  void ReleaseCalls(const std::string& owner, int64_t n);
  int64_t CallsRunning();
  // Counts the sandboxes that already exist (at startup): every record that holds a share.
  void Count(const std::vector<SandboxRecord>& sandboxes);
  nlohmann::json Usage(const std::string& owner);

 private:
  struct Use {
    int64_t sandboxes = 0;
    double cpu = 0;
    int64_t memory_mb = 0;
    double bucket = -1;  // create-rate tokens; -1 until first use
    double refilled_at = 0;
    int64_t calls = 0;  // fncall calls running
    double call_bucket = -1;
    double call_refilled_at = 0;
  };
  Mutex mu_;
  std::map<std::string, Use> use_ GUARDED_BY(mu_);
  StateStore* counted_by_ GUARDED_BY(mu_) = nullptr;
};

}  // namespace warren::server
