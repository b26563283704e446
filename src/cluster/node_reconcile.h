// A node squares what it runs with the cluster's records when it joins: at its start (after
// adopting what an earlier run left) and each time it joins again after its lease expired
// (etcd or the network was away long enough for the API servers to call it gone).
//  - A record `lost` on this node whose sandbox still runs here goes back to `running` (it
//    takes its owner's share and the node's room again: both were given back when it was lost).
//  - A sandbox running here whose record is gone, failed or names another node is deleted: its
//    owner deleted it while the node was away (a lost record is removed at once), so nothing
//    else ever will.
// Records `creating` here are left alone: an API server is making them now.
#pragma once

#include <string>
#include <vector>

#include "cluster/kv_store.h"
#include "node/node_api.h"

namespace warren::cluster {

struct NodeReconcileReport {
  int readmitted = 0;  // lost -> running
  int reaped = 0;      // running here without a record
};

// `running`: the ids of the sandboxes `node` holds now.
NodeReconcileReport ReconcileNode(KvStore* kv, node::NodeApi* node, const std::string& name,
                                  const std::vector<std::string>& running);

}  // namespace warren::cluster
