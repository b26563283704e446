// `warren node --simulate N`: N simulated nodes in one process (cluster/simulated_node.h), each
// with its own port, lease and record in etcd, for measuring API servers and placement at the
// unit's scale on one machine (bench/cluster.py). No root, no data dir: nothing is made.
#pragma once

#include <map>
#include <string>

#include "cluster/node_record.h"

namespace warren::cli {

struct SimulatedNodesOptions {
  std::string etcd;
  std::string listen;  // ADDR:PORT; PORT 0 gives each node a free port, else PORT, PORT+1, ...
  std::string name;    // N = 1: the node's name; else NAME-000, NAME-001, ...
  std::map<std::string, std::string> labels;
  int ttl_s = 5;
  int count = 1;
  cluster::Resources capacity;  // each node's
};

int RunSimulatedNodes(const SimulatedNodesOptions& o);

}  // namespace warren::cli
