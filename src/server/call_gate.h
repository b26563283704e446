// POST /v1/calls and /v1/calls:batch in front of the node's fncall service: what a principal
// may spend on calls (its quota: max_calls at once, call_rate per second; 429 with
// Retry-After past it) and the calls' metrics. Calls keep nothing, so there is nothing of one
// principal's for another to see.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "node/fncall/calls.h"
#include "server/auth.h"
#include "server/histogram.h"
#include "server/quota.h"

namespace warren::server {

class CallGate {
 public:
  explicit CallGate(QuotaTracker* quota) : quota_(quota) {}

  // Off (every call 503) until set; the service outlives the gate.
  void SetService(fncall::Calls* calls) { calls_ = calls; }
  bool enabled() const { return calls_ != nullptr; }
  // Stops the service's runners, before the node deletes every sandbox.
  void Stop();

  Result<nlohmann::json> Call(const Principal& who, const std::string& body);
  Result<nlohmann::json> CallBatch(const Principal& who, const std::string& body);

  // The calls' lines of /metrics.
  std::string RenderMetrics() const;

  // What the dashboard shows of calls: counts so far (the runner pools are the nodes').
  struct Stats {
    uint64_t admitted = 0, refused = 0;
    std::map<std::string, uint64_t> verdicts;  // a call's verdict, or "error" (no verdict)
  };
  Stats stats() const;

 private:
  // Runs `n` calls' worth of work under the caller's call quotas, counting them.
  Result<nlohmann::json> Admit(const Principal& who, int64_t n,
                               const std::function<Result<nlohmann::json>()>& run);

  QuotaTracker* quota_;
  fncall::Calls* calls_ = nullptr;
  Histogram seconds_;
  mutable Mutex mu_;
  uint64_t admitted_ GUARDED_BY(mu_) = 0;
  uint64_t refused_ GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> verdicts_ GUARDED_BY(mu_);
  // Counts the verdicts of a call's or a batch's answer.
  void CountVerdicts(const Result<nlohmann::json>& r);
};

}  // namespace warren::server
