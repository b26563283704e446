// Calls: what POST /v1/calls and /v1/calls:batch run on. In `warren serve` it is the node's
// own runner pool (fncall::CallService); on a cluster's API server it sends each call, or a
// share of a batch, to a node that runs fncall (cluster/cluster_calls.h). Requests and results
// are the contract's CallRequest and CallResult documents: the node checks them.
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace warren::fncall {

class Calls {
 public:
  virtual ~Calls() = default;
  // A CallRequest -> its CallResult.
  virtual Result<nlohmann::json> Call(const nlohmann::json& request) = 0;
  // {"calls": [CallRequest, ...]} -> {"results": [CallResult | {"error": {...}}, ...]}, in order.
  virtual Result<nlohmann::json> CallBatch(const nlohmann::json& request) = 0;
  // Runners and counts for /v1/nodes and /metrics (`calls`, `runs`, `runner_starts`, `runners`);
  // an object without them where the runners are elsewhere.
  virtual nlohmann::json Stats() const = 0;
  // No more calls: stops the runners where there are any.
  virtual void Shutdown() = 0;
};

// At most this many calls in one batch.
inline constexpr size_t kMaxBatchCalls = 10000;

}  // namespace warren::fncall
