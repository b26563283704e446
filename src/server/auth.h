// Who is calling: bearer tokens, the principals they stand for, and their scopes and quotas.
//
// The admin token is created on first start at DATA_DIR/admin.token (0600). Other tokens are
// made with `warren token create` (POST /v1/tokens, admin only) and shown once; the server keeps
// only their SHA-256 (tokens are 192 random bits, so a plain hash is enough: there is nothing
// to brute-force). Every sandbox belongs to the principal that created it and is invisible
// (404) to other principals; the admin sees everything.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace warren::server {

class StateStore;

// Per-principal limits; 0 means unlimited.
struct Quotas {
  int64_t max_sandboxes = 0;  // live (neither deleted nor failed) sandboxes at once
  double max_cpu = 0;         // sum of their `cpu`
  int64_t max_memory_mb = 0;  // sum of their `memory_mb`
  double create_rate = 0;     // sandbox creates per second (token bucket, burst = max(1, rate))
  int64_t max_calls = 0;      // fncall calls running at once (a batch counts each of its calls)
  double call_rate = 0;       // calls started per second (token bucket, burst = max(1, rate))
  nlohmann::json ToJson() const;
};

struct Principal {
  std::string name;
  std::vector<std::string> scopes;
  Quotas quotas;
  bool admin() const;
  // `admin` allows everything; `sandbox:*` allows `sandbox:read` and `sandbox:write`, and
  // `image:*` the image scopes; otherwise scopes match exactly.
  bool Allows(std::string_view scope) const;
  // Sees (and may act on) a resource owned by `owner`.
  bool Owns(std::string_view owner) const { return admin() || owner == name; }
};

// The scopes a token may carry.
const std::vector<std::string>& KnownScopes();
// What `warren token create` gives when no scopes are asked for.
std::vector<std::string> DefaultScopes();

// Reads the token file, creating it with a fresh random token if it does not exist.
Result<std::string> LoadOrCreateAdminToken(const std::string& path);

// Constant-time check of an "Authorization: Bearer TOKEN" header value.
bool BearerMatches(std::string_view header, std::string_view token);

class TokenRegistry {
 public:
  TokenRegistry(StateStore* state, std::string admin_token);
  // Loads the stored tokens (again: what was removed meanwhile goes).
  Status Load();
  // Several API servers share the tokens (a cluster): an unknown token makes this one read
  // the store again before refusing it (every request that misses sees a reading begun after
  // it arrived, and readings are at most 20 a second: misses wait up to 50 ms for the next),
  // and the owner calls Load() every few seconds so that removals reach every replica.
  void SetReloadOnMiss(bool on) {
    MutexLock lock(&mu_);
    reload_on_miss_ = on;
  }
  // The principal behind an Authorization header, or nullopt.
  std::optional<Principal> Authenticate(std::string_view authorization) const;
  // POST /v1/tokens: {"name", "scopes", "max_sandboxes", "max_cpu", "max_memory_mb",
  // "create_rate"} -> the record plus "token" (the only time it is shown).
  Result<nlohmann::json> Create(const std::string& body);
  nlohmann::json List() const;
  Status Remove(const std::string& name);

 private:
  StateStore* state_;
  std::string admin_token_;
  mutable Mutex mu_;
  // Reads the store and swaps the maps in (mutable: a cache of the store, refreshed by a
  // const Authenticate too).
  Status Reload() const;
  mutable std::map<std::string, Principal> by_hash_
      GUARDED_BY(mu_);  // sha256(token) hex -> principal
  mutable std::map<std::string, nlohmann::json> records_
      GUARDED_BY(mu_);  // name -> stored record (no secret)
  bool reload_on_miss_ GUARDED_BY(mu_) = false;
  uint64_t writes_ GUARDED_BY(mu_) = 0;  // tokens made or removed here (Reload)
  // Misses queue here for one reading at a time; when the last one began.
  mutable Mutex miss_mu_;  // taken before mu_, never after
  mutable std::chrono::steady_clock::time_point last_miss_reload_ GUARDED_BY(miss_mu_);
};

}  // namespace warren::server
