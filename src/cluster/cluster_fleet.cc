#include "cluster/cluster_fleet.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "cluster/keys.h"

namespace warren::cluster {

using nlohmann::json;

ClusterFleet::ClusterFleet(KvStore* kv, NodeDirectory* directory, Connect connect,
                           PlacementPolicy policy, std::string api_server)
    : kv_(kv),
      directory_(directory),
      connect_(std::move(connect)),
      policy_(policy),
      api_server_(std::move(api_server)),
      reservations_(kv,
                    [directory](const std::string& node) { return directory->AllocationOf(node); }),
      batcher_(&reservations_),
      reports_(
          [directory] {
            std::vector<std::string> names;
            for (const NodeView& v : directory->Ready()) names.push_back(v.record.name);
            return names;
          },
          [this](const std::string& name) {
            auto api = Node(name);
            if (!api.ok()) return json();
            json info = (*api)->Info();
            return info.contains("error") ? json() : info;  // unreachable: the record alone
          }) {
  directory_->SetOnNodeGone([this](const std::string& name) {
    std::function<void(const std::string&, const std::string&)> lost;
    {
      MutexLock lock(&mu_);
      lost = node_lost_;
    }
    if (lost) lost(name, "node " + name + " stopped heartbeating");
  });
}

Resources ClusterFleet::ResourcesOf(const node::PlacementAsk& ask) {
  return {static_cast<int64_t>(std::llround(ask.cpu * 1000)), static_cast<int64_t>(ask.memory_mb),
          static_cast<int64_t>(ask.disk_mb)};
}

Result<std::string> ClusterFleet::Place(const node::PlacementAsk& ask) {
  PlacementRequest req;
  req.backend = ask.backend;
  req.resources = ResourcesOf(ask);
  req.node_selector = ask.node_selector;
  req.layers = ask.layers;
  const std::vector<NodeView> nodes = directory_->Ready();
  // One seed for this replica's whole run: among nodes with about as much room, each replica
  // keeps preferring its own (so replicas rarely race on one node's reservation) and its
  // concurrent creates meet on the same node (and share a reservation transaction).
  const uint64_t seed = seed_;
  auto ranked = Rank(nodes, req, policy_, seed);
  if (!ranked.ok()) return ranked.status();
  // The limits come from the view just ranked: no second look-up (and copy) per candidate.
  std::map<std::string, const NodeRecord*> record_of;
  for (const NodeView& v : nodes) record_of[v.record.name] = &v.record;
  for (const std::string& name : *ranked) {
    std::vector<TxnOp> claim;
    if (!ask.sandbox_id.empty())
      claim.push_back(TxnOp::Put(keys::Creating(ask.sandbox_id),
                                 ToJson(CreateClaim{api_server_, name, req.resources}).dump()));
    Status st = batcher_.Reserve(name, req.resources, LimitOf(*record_of.at(name), policy_),
                                 std::move(claim));
    NoteOwnWrite(name);
    if (st.ok()) return name;
    if (st.code() != Code::kQuota) return st;
  }
  return Status(Code::kQuota, "place sandbox", runtime::BackendName(ask.backend),
                "every node that could take the sandbox is full")
      .WithRetryAfter(1);
}

void ClusterFleet::Release(const std::string& node, const node::PlacementAsk& ask) {
  // A create that failed after placement: its claim goes with the room.
  std::vector<TxnOp> claim;
  if (!ask.sandbox_id.empty()) claim.push_back(TxnOp::Delete(keys::Creating(ask.sandbox_id)));
  Status st = reservations_.Release(node, ResourcesOf(ask), 1, claim);
  NoteOwnWrite(node);
  if (!st.ok())
    spdlog::error("node {}: giving back a sandbox's reservation: {}", node, st.ToString());
}

bool ClusterFleet::Abandon(const std::string& sandbox_id) {
  const std::string key = keys::Creating(sandbox_id);
  auto item = kv_->Get(key);
  if (!item.ok()) return false;  // gone: someone gave it back (or it never reserved)
  auto doc = json::parse(item->value, nullptr, false);
  auto claim = ParseCreateClaim(doc);
  if (doc.is_discarded() || !claim.ok()) {
    spdlog::error("create claim {} does not parse; removed", key);
    (void)kv_->Delete(key);
    return false;
  }
  // The claim goes with the room, in one transaction that compares the claim as read: two
  // replicas cleaning up at once give it back once.
  Status st = reservations_.Release(claim->node, claim->each, 1, {TxnOp::Delete(key)},
                                    {Compare::ModIs(key, item->mod_revision)});
  NoteOwnWrite(claim->node);
  if (st.ok()) return true;
  if (st.code() != Code::kConflict)
    spdlog::warn("give back the room of abandoned create {}: {}", sandbox_id, st.ToString());
  return false;
}

void ClusterFleet::NoteOwnWrite(const std::string& node) {
  if (auto c = reservations_.LastSeen(node)) directory_->NoteAllocation(node, c->first, c->second);
}

Result<node::NodeApi*> ClusterFleet::Node(const std::string& name) {
  auto view = directory_->Get(name);
  if (!view)
    return Status(Code::kUnavailable, "reach node", name,
                  "the sandbox's node is not in the cluster now")
        .WithRetryAfter(1);
  MutexLock lock(&mu_);
  Connection& c = connections_[name];
  if (!c.api || c.started_at != view->record.started_at) {
    if (c.api) retired_.push_back(std::move(c.api));
    c.api = connect_(view->record);
    c.started_at = view->record.started_at;
    if (!c.api) return Status(Code::kUnavailable, "reach node", name, "cannot connect to it");
    if (sandbox_lost_) c.api->SetOnSandboxLost(sandbox_lost_);
  }
  return c.api.get();
}

Status ClusterFleet::SetNodeAdmin(const std::string& node, bool cordoned, bool draining) {
  bool known = directory_->Get(node).has_value();
  for (const std::string& name : directory_->Known()) known = known || name == node;
  if (!known) return NotFound("node", node);
  NodeAdmin admin;
  admin.cordoned = cordoned || draining;
  admin.draining = draining;
  WARREN_RETURN_IF_ERROR(kv_->Put(keys::NodeAdmin(node), ToJson(admin).dump()).status());
  // This replica's own view at once (the watch brings it to the others within milliseconds).
  directory_->NoteAdmin(node, admin);
  return Status::Ok();
}

std::vector<json> ClusterFleet::Infos() {
  std::vector<json> out;
  const std::map<std::string, json> reports = reports_.Get();
  for (const NodeView& v : directory_->Ready()) {
    auto report = reports.find(v.record.name);
    json n = report != reports.end() ? report->second : json::object();
    // The record's fields win: they are what placement sees.
    const json record = ToJson(v.record);
    for (const auto& [k, val] : record.items()) n[k] = val;
    n.erase("address");  // the API's nodes list is for tenants too
    n["state"] = v.admin.draining ? "draining" : v.admin.cordoned ? "cordoned" : "ready";
    n["reserved"] = ToJson(v.alloc)["reserved"];
    out.push_back(std::move(n));
  }
  for (const std::string& name : directory_->Known())
    out.push_back({{"name", name}, {"state", "down"}});
  return out;
}

void ClusterFleet::SetOnSandboxLost(node::SandboxLostFn lost) {
  MutexLock lock(&mu_);
  sandbox_lost_ = lost;
  for (auto& [name, c] : connections_)
    if (c.api) c.api->SetOnSandboxLost(lost);
}

void ClusterFleet::SetOnNodeLost(std::function<void(const std::string&, const std::string&)> gone) {
  MutexLock lock(&mu_);
  node_lost_ = std::move(gone);
}

}  // namespace warren::cluster
