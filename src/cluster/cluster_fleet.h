// ClusterFleet: the fleet of a cluster API server (node/fleet.h over etcd). A new sandbox goes
// where placement ranks best (cluster/placement.h, over the NodeDirectory's view) and where its
// reservation then succeeds (group-committed, cluster/reservation_batcher.h): a node that
// filled up meanwhile answers quota and the next one is tried. Room goes back with
// Reservations::Release. Nodes are reached through `connect` (a RemoteNode over the record's
// address; fakes in tests), one connection per node start: a node that restarted is
// reconnected. A node whose lease ends is reported lost.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "base/thread_annotations.h"
#include "cluster/membership.h"
#include "cluster/node_reports.h"
#include "cluster/placement.h"
#include "cluster/reservation_batcher.h"
#include "cluster/reservations.h"
#include "node/fleet.h"

namespace warren::cluster {

class ClusterFleet : public node::Fleet {
 public:
  using Connect = std::function<std::unique_ptr<node::NodeApi>(const NodeRecord& node)>;
  // `directory` must not be started yet: the fleet listens for nodes that go.
  // `api_server`: this replica's name (cluster/presence.h), written into each create's claim.
  ClusterFleet(KvStore* kv, NodeDirectory* directory, Connect connect, PlacementPolicy policy,
               std::string api_server = "");

  Result<std::string> Place(const node::PlacementAsk& ask) override;
  void Release(const std::string& node, const node::PlacementAsk& ask) override;
  // A cluster's create waits on round trips (etcd, the node) while the nodes do the work:
  // many at once, and those for one node share a reservation transaction.
  int CreatesAtOnce() const override { return 64; }
  bool Abandon(const std::string& sandbox_id) override;
  Result<node::NodeApi*> Node(const std::string& name) override;
  // Writes /warren/node/NAME/admin; every replica's directory sees it by its watch.
  Status SetNodeAdmin(const std::string& node, bool cordoned, bool draining) override;
  // Each node's record, placement state and reservation, with what the node reports of
  // itself (network, runners, pools: cluster/node_reports.h) where it answered in time.
  std::vector<nlohmann::json> Infos() override;
  void SetOnSandboxLost(node::SandboxLostFn lost) override;
  void SetOnNodeLost(
      std::function<void(const std::string& node, const std::string& reason)> gone) override;

  static Resources ResourcesOf(const node::PlacementAsk& ask);

 private:
  struct Connection {
    std::string started_at;  // of the node run it talks to
    std::unique_ptr<node::NodeApi> api;
  };

  // Shows the directory what this replica just wrote to a node's allocation (or read after a
  // lost race), so that its next placement does not rank on an older sum.
  void NoteOwnWrite(const std::string& node);

  KvStore* const kv_;
  NodeDirectory* const directory_;
  const Connect connect_;
  const PlacementPolicy policy_;
  const std::string api_server_;
  Reservations reservations_;
  ReservationBatcher batcher_;
  Mutex mu_;
  std::map<std::string, Connection> connections_ GUARDED_BY(mu_);
  // Connections of node runs that are gone, kept: a caller may still hold the pointer.
  std::vector<std::unique_ptr<node::NodeApi>> retired_ GUARDED_BY(mu_);
  node::SandboxLostFn sandbox_lost_ GUARDED_BY(mu_);
  std::function<void(const std::string&, const std::string&)> node_lost_ GUARDED_BY(mu_);
  const uint64_t seed_ = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  // What the ready nodes say of themselves, for Infos() (last: its thread ends first).
  NodeReports reports_;
};

}  // namespace warren::cluster
