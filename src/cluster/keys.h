// Where the cluster keeps what in etcd: every key the code writes is made here, so the layout
// docs/design.md describes ("Cluster: the key layout") is this file.
//
//   /warren/node/NAME/record  NodeRecord, under the node's lease: gone when the node is
//   /warren/node/NAME/admin   NodeAdmin: cordoned / draining, set by `warren node drain|cordon`
//   /warren/node/NAME/alloc   Allocation: what placement reserved on the node (CAS counter)
//   (one prefix per node, so that an API server lists and watches all of it as one range)
//   /warren/sandboxes/ID      SandboxRecord (the contract's Sandbox object)
//   /warren/shares/OWNER/ID   {cpu, memory_mb} of each record that holds its owner's share
//                             (written with the record; OWNER escaped): quotas count these
//   /warren/creating/ID       {"api_server"}: a create under way, and which replica makes it
//   /warren/apiservers/NAME   an API server, under its lease: gone when it is
//   /warren/layers/NAME:TAG   LayerRecord (a tag -> a content digest)
//   /warren/docs/KIND/ID      small documents: tokens (their hash, scopes, quotas), leases
//   /warren/steps/TRAJ/STEP   a trajectory step ({"exec_id", "doc"}); TRAJ escaped, STEP
//                             zero-padded so that keys sort by step
//   /warren/step-exec/EXEC    the step an exec recorded ({"traj", "step"})
//   /warren/cluster/secret    the cluster credential API servers present to nodes
//   /warren/cluster/admin-token  the admin token every API server accepts
#pragma once

#include <string>

namespace warren::cluster::keys {

inline const std::string kRoot = "/warren/";
inline const std::string kNodes = kRoot + "node/";
inline const std::string kSandboxes = kRoot + "sandboxes/";
inline const std::string kShares = kRoot + "shares/";
inline const std::string kCreating = kRoot + "creating/";
inline const std::string kApiServers = kRoot + "apiservers/";
inline const std::string kLayers = kRoot + "layers/";
inline const std::string kDocs = kRoot + "docs/";
inline const std::string kSteps = kRoot + "steps/";
inline const std::string kStepByExec = kRoot + "step-exec/";
inline const std::string kSecret = kRoot + "cluster/secret";
inline const std::string kAdminToken = kRoot + "cluster/admin-token";
inline const std::string kExpiry = kRoot + "expiry/";
inline const std::string kExpiryLeader = kRoot + "leaders/expiry";
// Idle timeouts (cluster/idle_index.h): deadlines in time order, and each sandbox's current one.
inline const std::string kIdle = kRoot + "idle/";
inline const std::string kIdleAt = kRoot + "idle-at/";

inline std::string Node(const std::string& name) { return kNodes + name + "/record"; }
inline std::string NodeAdmin(const std::string& name) { return kNodes + name + "/admin"; }
inline std::string Alloc(const std::string& name) { return kNodes + name + "/alloc"; }
// A key under kNodes split into the node's name and what it is ("record", "admin", "alloc");
// false for any other key.
inline bool SplitNodeKey(const std::string& key, std::string* name, std::string* what) {
  if (key.compare(0, kNodes.size(), kNodes) != 0) return false;
  const size_t slash = key.find('/', kNodes.size());
  if (slash == std::string::npos || slash == kNodes.size()) return false;
  *name = key.substr(kNodes.size(), slash - kNodes.size());
  *what = key.substr(slash + 1);
  return true;
}
inline std::string Sandbox(const std::string& id) { return kSandboxes + id; }
inline std::string Layer(const std::string& name, const std::string& tag) {
  return kLayers + name + ":" + tag;
}
inline std::string Docs(const std::string& kind) { return kDocs + kind + "/"; }
inline std::string Doc(const std::string& kind, const std::string& id) { return Docs(kind) + id; }
// A name as one path segment: '/' and '%' escaped, so that no name's prefix holds another's
// keys.
inline std::string Segment(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '%')
      out += "%25";
    else if (c == '/')
      out += "%2F";
    else
      out += c;
  }
  return out;
}
inline std::string Trajectory(const std::string& traj) { return kSteps + Segment(traj) + "/"; }
inline std::string Shares(const std::string& owner) { return kShares + Segment(owner) + "/"; }
inline std::string Share(const std::string& owner, const std::string& id) {
  return Shares(owner) + id;
}
inline std::string Creating(const std::string& id) { return kCreating + id; }
inline std::string ApiServer(const std::string& name) { return kApiServers + name; }
inline std::string Step(const std::string& traj, int64_t step) {
  std::string n = std::to_string(step);
  return Trajectory(traj) + std::string(n.size() < 20 ? 20 - n.size() : 0, '0') + n;
}
inline std::string StepByExec(const std::string& exec_id) { return kStepByExec + exec_id; }

// A sandbox's deadline in the TTL index: zero-padded Unix milliseconds, so keys sort by time.
inline std::string ExpiryMs(int64_t ms) {
  std::string n = std::to_string(ms < 0 ? 0 : ms);
  return std::string(n.size() < 15 ? 15 - n.size() : 0, '0') + n;
}
inline std::string Expiry(int64_t deadline_ms, const std::string& id) {
  return kExpiry + ExpiryMs(deadline_ms) + "/" + id;
}
// The end of the range of every deadline at or before `now_ms`.
inline std::string ExpiryUpTo(int64_t now_ms) { return kExpiry + ExpiryMs(now_ms + 1); }
inline std::string ExpiryId(const std::string& key) { return key.substr(key.rfind('/') + 1); }
inline std::string Idle(int64_t deadline_ms, const std::string& id) {
  return kIdle + ExpiryMs(deadline_ms) + "/" + id;
}
inline std::string IdleUpTo(int64_t now_ms) { return kIdle + ExpiryMs(now_ms + 1); }
// The deadline part of an idle index key, as stored in IdleAt.
inline std::string IdleDeadlineOf(const std::string& key) {
  return key.substr(kIdle.size(), key.rfind('/') - kIdle.size());
}
inline std::string IdleAt(const std::string& id) { return kIdleAt + id; }

// The name after a prefix ("/warren/sandboxes/sb-1" -> "sb-1").
inline std::string NameOf(const std::string& key, const std::string& prefix) {
  return key.substr(prefix.size());
}

}  // namespace warren::cluster::keys
