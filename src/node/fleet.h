// Fleet: the nodes an API server places sandboxes on and reaches them through. `warren serve`
// has one, its LocalNode (SingleNodeFleet); a cluster API server has every node of the cluster,
// chosen by placement (cluster/placement.h) with room reserved in etcd, and reached over the
// network. The API code (server/routes.cc) is the same for both: it asks the fleet where a new
// sandbox goes and, for every later operation, for the node its record names.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "node/node_api.h"
#include "node/node_selector.h"

namespace warren::node {

// What placement needs to know of a new sandbox.
struct PlacementAsk {
  runtime::BackendKind backend = runtime::BackendKind::kContainer;
  double cpu = 1;
  uint64_t memory_mb = 0, disk_mb = 0;
  std::map<std::string, std::string> node_selector;
  std::vector<std::string> layers;  // digests
  // The sandbox being placed: a cluster records its claim with the reservation, so that the
  // room goes back even if the API server dies before the sandbox's record is written.
  std::string sandbox_id;
};

class Fleet {
 public:
  virtual ~Fleet() = default;
  // Picks the node for a new sandbox and holds room for it there until Release. kQuota when
  // every node that could take it is full, kInvalid when none ever could.
  virtual Result<std::string> Place(const PlacementAsk& ask) = 0;
  // How many creates of one batch to run at once.
  virtual int CreatesAtOnce() const = 0;
  // Gives back the room a sandbox held on `node` (deleted, failed, lost, or never made).
  virtual void Release(const std::string& node, const PlacementAsk& ask) = 0;
  // Gives back the room of a sandbox placed by an API server that died before it wrote the
  // sandbox's record (nothing else names that room). Once, whoever calls it; true if this call
  // gave it back.
  virtual bool Abandon(const std::string& sandbox_id) = 0;
  // The node a sandbox record names. kUnavailable when that node cannot be reached now.
  virtual Result<NodeApi*> Node(const std::string& name) = 0;
  // Takes a node out of placement (cordoned: no new sandboxes; draining: and its sandboxes
  // are being deleted) or puts it back (both false). kNotFound for a node the fleet does not
  // know; kInvalid where there is nothing to place elsewhere (warren serve's one node).
  virtual Status SetNodeAdmin(const std::string& node, bool cordoned, bool draining) = 0;
  // Every node's Info(), for /v1/nodes and /metrics.
  virtual std::vector<nlohmann::json> Infos() = 0;
  // `lost(id, reason)`: a sandbox's agent died by itself, or its node failed it (its node saw
  // it; NodeApi::SetOnSandboxLost).
  virtual void SetOnSandboxLost(SandboxLostFn lost) = 0;
  // `gone(node, reason)`: a node left (it stopped heartbeating): its sandboxes are lost.
  virtual void SetOnNodeLost(
      std::function<void(const std::string& node, const std::string& reason)> gone) = 0;
};

// The fleet of `warren serve`: its own node, which takes every sandbox (the node's own limits
// and the API's quotas bound them) and holds every record, whatever name an earlier run gave.
class SingleNodeFleet : public Fleet {
 public:
  explicit SingleNodeFleet(NodeApi* node) : node_(node) {}
  // The one node takes every sandbox whose selector it matches (its name is its only label).
  Result<std::string> Place(const PlacementAsk& ask) override {
    if (!SelectorMatches(node_->name(), {}, ask.node_selector))
      return Status(Code::kInvalid, "place sandbox", node_->name(), kNoNodeCarriesSelector);
    return node_->name();
  }
  // Each create spends much of its time waiting on the kernel (clone, mounts, the agent's
  // setup): a few at once go faster than one by one without flooding the host.
  int CreatesAtOnce() const override { return 4; }
  void Release(const std::string&, const PlacementAsk&) override {}
  bool Abandon(const std::string&) override { return false; }  // one process: no such thing
  Result<NodeApi*> Node(const std::string&) override { return node_; }
  Status SetNodeAdmin(const std::string& node, bool, bool) override {
    return Status(Code::kInvalid, "cordon node", node,
                  "warren serve has one node and nowhere else to place sandboxes; cordon and "
                  "drain are for the nodes of a cluster");
  }
  std::vector<nlohmann::json> Infos() override {
    nlohmann::json info = node_->Info();
    info["state"] = "ready";  // as a cluster's nodes say theirs (nothing cordons this one)
    return {std::move(info)};
  }
  void SetOnSandboxLost(SandboxLostFn lost) override { node_->SetOnSandboxLost(std::move(lost)); }
  // The node is this process: it cannot leave without the API going too.
  void SetOnNodeLost(std::function<void(const std::string&, const std::string&)>) override {}

 private:
  NodeApi* const node_;
};

}  // namespace warren::node
