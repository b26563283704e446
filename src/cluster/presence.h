// Presence: an API server is in the cluster while its lease lives. It publishes
// /warren/apiservers/NAME under a lease of a few seconds and keeps the lease alive on a thread
// of its own; a replica that dies (kill -9, a lost machine) drops out when the lease expires,
// and the creates it left half-made are cleaned up by the others (StateStore::OrphanedCreates).
// A lease that expired while etcd was out of reach is granted again and the key put back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <string>
#include <thread>

#include "base/thread_annotations.h"
#include "cluster/kv_store.h"

namespace warren::cluster {

class Presence {
 public:
  Presence(KvStore* kv, std::string name, int64_t ttl_s = 5);
  ~Presence();  // revokes the lease: the replica leaves at once

  // Grants the lease and puts the key (fails if etcd cannot be reached), then keeps it alive.
  Status Start();
  const std::string& name() const { return name_; }
  // The lease the replica's key lives under now (granted again after one expired).
  int64_t lease() const { return lease_.load(); }

 private:
  Status Register();
  void Loop();

  KvStore* const kv_;
  const std::string name_;
  const int64_t ttl_s_;
  std::atomic<int64_t> lease_{0};
  Mutex mu_;
  std::condition_variable_any wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace warren::cluster
