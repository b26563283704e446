#include "cluster/placement.h"

#include <algorithm>
#include <queue>
#include <set>

#include "node/node_selector.h"

namespace warren::cluster {

namespace {

// A deterministic number in [0, 1) from the seed and a node's name (splitmix64).
double Jitter(uint64_t seed, const std::string& name) {
  uint64_t x = seed ^ std::hash<std::string>{}(name);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53);
}

bool Selected(const NodeRecord& n, const std::map<std::string, std::string>& selector) {
  return node::SelectorMatches(n.name, n.labels, selector);
}

double LayerShare(const NodeRecord& n, const std::vector<std::string>& layers) {
  if (layers.empty()) return 0;
  std::set<std::string> have(n.layers.begin(), n.layers.end());
  size_t hit = 0;
  for (const auto& l : layers) hit += have.count(l);
  return static_cast<double>(hit) / static_cast<double>(layers.size());
}

// The share of the node's limit left free after adding `want` (the scarcer of CPU and memory).
double FreeShareAfter(const NodeView& n, const Resources& want, const Resources& limit) {
  auto share = [](int64_t lim, int64_t used) {
    return lim <= 0 ? 0.0 : static_cast<double>(lim - used) / static_cast<double>(lim);
  };
  const Resources& r = n.alloc.reserved;
  return std::min(share(limit.cpu_milli, r.cpu_milli + want.cpu_milli),
                  share(limit.memory_mb, r.memory_mb + want.memory_mb));
}

double Score(const NodeView& n, const PlacementRequest& req, const PlacementPolicy& policy,
             const Resources& limit, double layer_share, uint64_t seed) {
  const double free = FreeShareAfter(n, req.resources, limit);
  const double room = policy.strategy == PlacementPolicy::Strategy::kSpread ? free : 1.0 - free;
  return room + policy.layer_weight * layer_share + policy.jitter * Jitter(seed, n.record.name);
}

}  // namespace

Resources LimitOf(const NodeRecord& node, const PlacementPolicy& policy) {
  // A node that set its own ratio (it reclaims idle memory itself) is taken at its word.
  const double cpu = node.cpu_overcommit > 0 ? node.cpu_overcommit : policy.cpu_overcommit;
  const double mem = node.memory_overcommit > 0 ? node.memory_overcommit : policy.memory_overcommit;
  return {static_cast<int64_t>(static_cast<double>(node.capacity.cpu_milli) * cpu),
          static_cast<int64_t>(static_cast<double>(node.capacity.memory_mb) * mem),
          node.capacity.disk_mb};
}

bool Fits(const NodeView& node, const Resources& want, const PlacementPolicy& policy) {
  const Resources limit = LimitOf(node.record, policy);
  const Resources& r = node.alloc.reserved;
  return r.cpu_milli + want.cpu_milli <= limit.cpu_milli &&
         r.memory_mb + want.memory_mb <= limit.memory_mb &&
         r.disk_mb + want.disk_mb <= limit.disk_mb;
}

Result<std::vector<std::string>> Rank(const std::vector<NodeView>& nodes,
                                      const PlacementRequest& req, const PlacementPolicy& policy,
                                      uint64_t seed) {
  const std::string backend = runtime::BackendName(req.backend);
  size_t up = 0, with_backend = 0, selected = 0, big_enough = 0;
  std::vector<std::pair<double, std::string>> scored;
  for (const NodeView& n : nodes) {
    if (n.admin.cordoned || n.admin.draining) continue;
    ++up;
    if (!n.record.backends.count(req.backend)) continue;
    ++with_backend;
    if (!Selected(n.record, req.node_selector)) continue;
    ++selected;
    // Could it ever hold the request, were it empty?
    NodeView empty{n.record, n.admin, {}};
    if (!Fits(empty, req.resources, policy)) continue;
    ++big_enough;
    if (!Fits(n, req.resources, policy)) continue;
    const Resources limit = LimitOf(n.record, policy);
    scored.emplace_back(Score(n, req, policy, limit, LayerShare(n.record, req.layers), seed),
                        n.record.name);
  }
  if (scored.empty()) {
    if (up == 0) return Status(Code::kUnavailable, "place sandbox", "", "no node is ready");
    if (with_backend == 0)
      return Status(Code::kInvalid, "place sandbox", backend,
                    "no ready node runs the " + backend + " backend");
    if (selected == 0)
      return Status(Code::kInvalid, "place sandbox", backend, node::kNoNodeCarriesSelector);
    if (big_enough == 0)
      return Status(Code::kInvalid, "place sandbox", backend,
                    "no node is large enough for the sandbox's cpu, memory and disk");
    return Status(Code::kQuota, "place sandbox", backend,
                  "every node that could take the sandbox is full")
        .WithRetryAfter(1);
  }
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> out;
  out.reserve(scored.size());
  for (auto& [score, name] : scored) out.push_back(std::move(name));
  return out;
}

std::map<std::string, int64_t> PlanBatch(const std::vector<NodeView>& nodes,
                                         const PlacementRequest& req, int64_t count,
                                         const PlacementPolicy& given, uint64_t seed) {
  // No jitter inside a batch: a node's fixed offset would skew the whole batch towards it.
  // Batches of two API servers still differ where scores tie (the seed orders the ties).
  PlacementPolicy policy = given;
  policy.jitter = 0;
  std::map<std::string, int64_t> plan;
  auto ranked = Rank(nodes, req, policy, seed);
  if (!ranked.ok()) return plan;
  std::map<std::string, NodeView> views;
  for (const NodeView& n : nodes) views[n.record.name] = n;
  // Best score first; a node's score is recomputed as the batch fills it. Equal scores are
  // ordered by the seed, so that two API servers' batches start on different nodes.
  struct Entry {
    double score, tie;
    std::string name;
  };
  auto worse = [](const Entry& a, const Entry& b) {
    return a.score != b.score ? a.score < b.score : a.tie < b.tie;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  std::map<std::string, double> layer_share;
  auto push = [&](const std::string& name) {
    const NodeView& n = views[name];
    heap.push({Score(n, req, policy, LimitOf(n.record, policy), layer_share[name], seed),
               Jitter(seed, name), name});
  };
  for (const auto& name : *ranked) {
    layer_share[name] = LayerShare(views[name].record, req.layers);
    push(name);
  }
  int64_t placed = 0;
  while (placed < count && !heap.empty()) {
    const std::string name = heap.top().name;
    heap.pop();
    NodeView& n = views[name];
    if (!Fits(n, req.resources, policy)) continue;  // full: leaves the heap
    n.alloc.reserved += req.resources;
    ++n.alloc.sandboxes;
    ++plan[name];
    ++placed;
    if (Fits(n, req.resources, policy)) push(name);
  }
  return plan;
}

}  // namespace warren::cluster
