// Placement: which node takes a sandbox. Pure functions over a view of the nodes (their
// records, admin flags and reservations), so every rule is unit-tested without a cluster; the
// reservation that makes a choice binding is Reservations (reservations.h).
//
// Filter: the node is up and not cordoned or draining, has the backend, carries every label
// the request selects, and its reservations plus the request stay within its capacity times
// the overcommit ratios (CPU, memory; disk is never overcommitted): the node's own where its
// record sets them, else the policy's.
// Score: the room left after placing (spread prefers more, pack less), plus `layer_weight`
// times the share of the request's layers the node already caches, plus a little seeded
// jitter so that API servers placing at once do not all pick the same node and collide on
// its reservation (ClusterFleet seeds it once per run: each replica keeps its preference).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/node_record.h"

namespace warren::cluster {

struct PlacementPolicy {
  double cpu_overcommit = 1.0;
  double memory_overcommit = 1.0;
  enum class Strategy { kSpread, kPack };
  Strategy strategy = Strategy::kSpread;
  double layer_weight = 0.25;
  double jitter = 0.02;
};

struct PlacementRequest {
  runtime::BackendKind backend = runtime::BackendKind::kContainer;
  Resources resources;
  std::map<std::string, std::string> node_selector;  // labels the node must carry
  std::vector<std::string> layers;                   // digests
};

struct NodeView {
  NodeRecord record;
  NodeAdmin admin;
  Allocation alloc;
};

// The most the node may have reserved under `policy`.
Resources LimitOf(const NodeRecord& node, const PlacementPolicy& policy);
bool Fits(const NodeView& node, const Resources& want, const PlacementPolicy& policy);

// The nodes that can take `req`, best first. None: kQuota (no room: retry later) or kInvalid
// (no node could ever take it: no such backend or labels), naming the filter that left none.
Result<std::vector<std::string>> Rank(const std::vector<NodeView>& nodes,
                                      const PlacementRequest& req, const PlacementPolicy& policy,
                                      uint64_t seed);

// `count` sandboxes of one request spread over the nodes in one pass (each taken where the
// score is best given what the batch already put where): node -> how many. Fewer than `count`
// when the nodes are full.
std::map<std::string, int64_t> PlanBatch(const std::vector<NodeView>& nodes,
                                         const PlacementRequest& req, int64_t count,
                                         const PlacementPolicy& policy, uint64_t seed);

}  // namespace warren::cluster
