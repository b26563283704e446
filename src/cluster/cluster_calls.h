// ClusterCalls: POST /v1/calls and /v1/calls:batch on a cluster's API server (fncall::Calls
// over the nodes that run fncall). A call goes to the ready, schedulable fncall node this
// replica has the fewest calls running on; ties go by a hash of the runner image and the node,
// so one image's calls gather where its runners are warm. A node that cannot take it
// (unreachable, no fncall service) is left for the next, up to kTries nodes. A batch is cut
// into one contiguous share per node (at least kMinShare calls each), the shares run at once,
// and the results come back in the batch's order; a share whose node fails goes to the next.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "cluster/placement.h"
#include "node/fncall/calls.h"
#include "node/node_api.h"

namespace warren::cluster {

class ClusterCalls : public fncall::Calls {
 public:
  static constexpr int kTries = 3;
  static constexpr size_t kMinShare = 8;

  using ListNodes = std::function<std::vector<NodeView>()>;
  using Connect = std::function<Result<node::NodeApi*>(const std::string& node)>;
  // `nodes`: the directory's view (NodeDirectory::Ready); `connect`: the fleet's connection
  // to a node (node::Fleet::Node).
  ClusterCalls(ListNodes nodes, Connect connect);

  Result<nlohmann::json> Call(const nlohmann::json& request) override;
  Result<nlohmann::json> CallBatch(const nlohmann::json& request) override;
  // What this replica sent where: {"sent": N, "retried": N, "running": {node: N}}.
  nlohmann::json Stats() const override;
  void Shutdown() override;

 private:
  // Fncall nodes for a call of runner image `image`, best first.
  std::vector<std::string> Candidates(const std::string& image) const;
  // `request` (a call, or with `batch` a batch of `weight` calls) on the first of `nodes` that
  // takes it.
  Result<nlohmann::json> Send(const nlohmann::json& request, bool batch, size_t weight,
                              const std::vector<std::string>& nodes);

  const ListNodes nodes_;
  const Connect connect_;
  mutable Mutex mu_;
  std::map<std::string, int64_t> running_ GUARDED_BY(mu_);  // calls in flight, by node
  std::atomic<uint64_t> sent_{0}, retried_{0};
  std::atomic<bool> stopped_{false};
};

}  // namespace warren::cluster
