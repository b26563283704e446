// Job leases: a trainer takes a lease, ties its sandboxes to it and renews it by heartbeat.
// When a lease expires unrenewed (the trainer died) or is released, its sandboxes are deleted
// or paused (their `on_lease_expiry`), so a crashed job leaks nothing.
//
// Leases are stored (SQLite) with a wall-clock expiry so that a restarted daemon keeps them;
// the table here is the in-memory index the reaper polls.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "server/auth.h"

namespace warren::server {

class StateStore;

class LeaseTable {
 public:
  explicit LeaseTable(StateStore* state) : state_(state) {}
  // Loads stored leases (expired ones are returned by the next Expired()).
  void Load();
  // POST /v1/leases {"ttl_s"}; renew with an optional new ttl.
  Result<nlohmann::json> Create(const Principal& who, const std::string& body);
  Result<nlohmann::json> Renew(const Principal& who, const std::string& id,
                               const std::string& body);
  // Forgets the lease; the caller then applies its sandboxes' expiry action.
  Status Release(const Principal& who, const std::string& id);
  // The live lease `id` if `who` owns it (not_found otherwise, also when expired).
  Result<nlohmann::json> Get(const Principal& who, const std::string& id);
  // Removes and returns the ids of leases whose expiry has passed.
  std::vector<std::string> TakeExpired();
  // Several API servers share the leases (a cluster): each lookup reads the stored lease (it
  // may have been made, renewed or released through another replica), and TakeExpired reads
  // them all and returns a lease only to the replica whose removal of it succeeded, so its
  // sandboxes' expiry action runs once.
  void SetShared(bool shared);
  // Sandbox `sandbox_id` of lease `id` was lost (its node went): the lease's `lost` list
  // says so (at most 1,000, newest last), which its holder reads in the renewal's answer.
  void NoteLost(const std::string& id, const std::string& sandbox_id);

 private:
  // The stored lease `id` into the table (shared: another replica may have changed it).
  void Refresh(const std::string& id) REQUIRES(mu_);
  Result<double> ParseTtl(const std::string& body, double fallback);
  StateStore* state_;
  Mutex mu_;
  std::map<std::string, nlohmann::json> leases_ GUARDED_BY(mu_);  // id -> doc (with "expires_unix")
  bool shared_ GUARDED_BY(mu_) = false;
};

}  // namespace warren::server
