// Per-principal quotas: live sandboxes, their CPU and memory, and a create-rate token bucket.
// A create reserves before it starts and releases if it fails, so concurrent creates can never
// together overshoot a limit.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "server/auth.h"
#include "server/sandbox_record.h"

namespace warren::server {

class QuotaTracker {
 public:
  // Room for one more sandbox of (cpu, memory_mb) owned by `who`, or a `quota` error naming
  // the limit.
  Status Reserve(const Principal& who, double cpu, int64_t memory_mb);
  void Release(const std::string& owner, double cpu, int64_t memory_mb);
  // The sandbox `id` holds its share from now on (its create succeeded).
  void Hold(const std::string& id);
  // Gives back the share `id` holds, once: a sandbox that failed (it runs nothing and holds
  // no resources any more) and is then deleted gives it back when it failed. True when it
  // was held until now.
  bool ReleaseHeld(const std::string& id, const std::string& owner, double cpu, int64_t memory_mb);
  // Room for `n` more fncall calls of `who` (a call, or a batch of n): its concurrency
  // (max_calls) and rate (call_rate: a token bucket of burst max(1, rate); a batch needs one
  // token and may leave the bucket in debt, so a batch larger than the burst is not refused
  // forever) quotas. A refusal is a `quota` status carrying when to retry; a batch larger than
  // max_calls is `invalid` (it could never run).
  Status ReserveCalls(const Principal& who, int64_t n);
  void ReleaseCalls(const std::string& owner, int64_t n);
  int64_t CallsRunning();
  // Counts the sandboxes that already exist (at startup): every record but failed ones.
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
  std::set<std::string> held_ GUARDED_BY(mu_);  // sandboxes holding a share
};

}  // namespace warren::server
