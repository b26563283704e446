// The cluster credential: a random secret kept in etcd (keys::kSecret) that API servers send
// to nodes and nodes require of every request (cluster/node_service.h). Whoever may read etcd
// is inside the cluster already, so keeping it there adds no one; it spares operators a file
// to copy to every machine. The first role to start makes it, by compare-and-swap, so two
// starting at once agree.
#pragma once

#include <string>

#include "base/status.h"
#include "cluster/kv_store.h"

namespace warren::cluster {

Result<std::string> LoadOrCreateClusterSecret(KvStore* kv);

// The cluster's admin token (keys::kAdminToken), the same way: every API server of a cluster
// accepts it, and each writes it to its DATA_DIR/admin.token as `warren serve` does.
Result<std::string> LoadOrCreateClusterAdminToken(KvStore* kv);

}  // namespace warren::cluster
