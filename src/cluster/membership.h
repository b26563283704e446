// Membership: a node is in the cluster while its lease lives. NodeHeartbeat (on the node)
// holds the lease, keeps it alive and publishes the node's record under it; NodeDirectory (on
// each API server) lists and watches the nodes, their admin flags and their reservations, and
// says when a node's record goes (its lease expired: the node stopped heartbeating).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "cluster/kv_store.h"
#include "cluster/node_record.h"
#include "cluster/placement.h"

namespace warren::cluster {

class NodeHeartbeat {
 public:
  // `snapshot` gives the node's record now; it is republished when it changed, at most once
  // per `publish_every_ms`.
  NodeHeartbeat(KvStore* kv, int64_t ttl_s, std::function<NodeRecord()> snapshot,
                int publish_every_ms = 1000);
  ~NodeHeartbeat();

  // Grants the lease and publishes the record (fails if etcd cannot be reached), then keeps
  // both up on a thread: a lease that expired while etcd or the network was away is granted
  // again and the record republished (the node comes back).
  Status Start();
  // Stops heartbeating; `leave`: revokes the lease, so the record goes at once (a clean
  // shutdown) rather than after the TTL.
  void Stop(bool leave);
  // Publishes now (a change placement should see soon, such as a new cached layer).
  void Poke();
  // `rejoined()` runs on the heartbeat's thread each time the node joins again after its
  // lease expired (the API servers took its sandboxes for lost meanwhile). Set before Start.
  void SetOnRejoin(std::function<void()> rejoined) { on_rejoin_ = std::move(rejoined); }
  // True while the lease is known to be alive.
  bool registered() const { return registered_.load(); }
  int64_t lease() const { return lease_.load(); }

 private:
  void Loop();
  Status Register();
  Status Publish(bool force);

  KvStore* const kv_;
  const int64_t ttl_s_;
  const std::function<NodeRecord()> snapshot_;
  const int publish_every_ms_;
  std::atomic<int64_t> lease_{0};
  std::atomic<bool> registered_{false};
  Mutex mu_;
  std::condition_variable_any wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool poked_ GUARDED_BY(mu_) = false;
  std::string published_;  // the record's JSON as last written; the loop's thread only
  std::function<void()> on_rejoin_;
  std::thread thread_;
};

class NodeDirectory {
 public:
  explicit NodeDirectory(KvStore* kv);
  ~NodeDirectory();

  // `gone(name)`: a node's record was deleted (its lease expired or it left). Called on a
  // watch thread, never concurrently.
  void SetOnNodeGone(std::function<void(const std::string& name)> gone);
  // Lists, then watches from the list's revision. A watch that ends (compaction) lists again.
  Status Start();

  // Every node that is up, with its admin flags and reservations, for placement.
  std::vector<NodeView> Ready() const;
  std::optional<NodeView> Get(const std::string& name) const;
  // An allocation this replica just wrote (at `mod_revision`), seen before the watch brings it:
  // its next placement must not rank on the sum from before its own write.
  void NoteAllocation(const std::string& name, const Allocation& alloc, int64_t mod_revision);
  // Admin flags this replica just wrote, seen before the watch brings them.
  void NoteAdmin(const std::string& name, const NodeAdmin& admin);
  // The node's allocation as last seen, with its mod revision (none: never seen).
  std::optional<std::pair<Allocation, int64_t>> AllocationOf(const std::string& name) const;
  // Nodes with admin flags but no live record (down, or never joined).
  std::vector<std::string> Known() const;

 private:
  Status Load();
  void OnEvents(const std::vector<WatchEvent>& events);
  void OnEnd(const Status& st);

  KvStore* const kv_;
  std::function<void(const std::string&)> gone_;
  mutable Mutex mu_;
  std::map<std::string, NodeRecord> nodes_ GUARDED_BY(mu_);
  std::map<std::string, NodeAdmin> admin_ GUARDED_BY(mu_);
  // With the mod revision it was read at: the newer of the watch's and NoteAllocation's wins.
  std::map<std::string, std::pair<Allocation, int64_t>> alloc_ GUARDED_BY(mu_);
  // Applies one key's value (or its deletion: `value` null) to the maps; the name of a node
  // whose record went, or "".
  std::string ApplyLocked(const std::string& key, const std::string* value, int64_t mod_revision)
      REQUIRES(mu_);
  void Relister();

  Mutex watch_mu_;  // the watch is replaced by the relister's thread
  std::unique_ptr<Watch> watch_ GUARDED_BY(watch_mu_);
  std::condition_variable_any relist_cv_;
  bool relist_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread relister_;
};

}  // namespace warren::cluster
