// What a node publishes about itself (NodeRecord, under its lease), what an operator sets on
// it (NodeAdmin: cordon, drain) and what placement has reserved on it (Allocation). Typed,
// parsed strictly from etcd: a record with an unknown field or a wrong type is an error.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/backend_kind.h"

namespace warren::cluster {

// CPU in thousandths of a core, memory and disk in MiB: integers, so that sums in etcd are
// exact.
struct Resources {
  int64_t cpu_milli = 0, memory_mb = 0, disk_mb = 0;
  Resources& operator+=(const Resources& o);
  Resources& operator-=(const Resources& o);
  Resources operator*(int64_t n) const;
  bool operator==(const Resources&) const = default;
};

struct NodeRecord {
  std::string name;
  std::string address;  // http://HOST:PORT of the node's API (API servers only)
  Resources capacity;   // what the machine has for sandboxes
  Resources used;       // what its live sandboxes use now (memory: charged, cpu: limits)
  std::set<runtime::BackendKind> backends;
  std::map<std::string, std::string> labels;
  std::vector<std::string> layers;  // digests of the layers in its local cache
  int64_t sandboxes = 0;            // live sandboxes on it
  std::string started_at;           // RFC 3339: a new value means the node restarted
  // The node's own overcommit ratios (`warren node --memory-overcommit/--cpu-overcommit`:
  // it reclaims idle memory, node/density), which placement honours over the API server's
  // policy; 0: not set, the policy's.
  double memory_overcommit = 0, cpu_overcommit = 0;
  // HOST:PORT of the node's package-mirror peer listener (net/mirror_peers.h): the other
  // nodes' egress proxies fetch the keys this node owns through it. Empty: none.
  std::string mirror;
};

Result<NodeRecord> ParseNodeRecord(const nlohmann::json& j);
nlohmann::json ToJson(const NodeRecord& n);

struct NodeAdmin {
  bool cordoned = false;  // takes no new sandboxes
  bool draining = false;  // ... and its sandboxes are being deleted
};
Result<NodeAdmin> ParseNodeAdmin(const nlohmann::json& j);
nlohmann::json ToJson(const NodeAdmin& a);

// What placement reserved on a node: the sum of the requests of the sandboxes it put there.
struct Allocation {
  Resources reserved;
  int64_t sandboxes = 0;
};
Result<Allocation> ParseAllocation(const nlohmann::json& j);
nlohmann::json ToJson(const Allocation& a);

// A create under way (/warren/creating/ID): which API server makes it, on which node, and the
// room it reserved there. Written with the reservation and again with the record, deleted
// when the record leaves `creating`: a claim whose API server is gone is an orphan, and the
// room it names goes back exactly once (the release compares the claim's revision).
struct CreateClaim {
  std::string api_server, node;
  Resources each;
};
Result<CreateClaim> ParseCreateClaim(const nlohmann::json& j);
nlohmann::json ToJson(const CreateClaim& c);

// A name for a node, a label key or value: [A-Za-z0-9._-], 1..63 characters.
bool ValidNodeName(const std::string& name);

}  // namespace warren::cluster
