// Durable state of the embedded `warren serve`: SQLite in WAL mode. Records are JSON
// documents keyed by id, plus the columns we filter on. Thread-safe (one connection, a mutex).
#pragma once

#include <sqlite3.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace warren::server {

struct LayerRecord {
  std::string name, tag, digest, kind, created_at, source;
  uint64_t size = 0;
  nlohmann::json ToJson() const;
};

class StateStore {
 public:
  // `durable`: every commit is fsynced (synchronous=FULL), for records that must survive a
  // power loss, not only a crash of the daemon (WAL with synchronous=NORMAL).
  static Result<std::unique_ptr<StateStore>> Open(const std::string& path, bool durable = false);
  ~StateStore();

  // Sandboxes: the full API object as JSON, with id and state pulled out.
  Status PutSandbox(const nlohmann::json& sandbox);
  Result<nlohmann::json> GetSandbox(const std::string& id);
  std::vector<nlohmann::json> ListSandboxes();
  Status RemoveSandbox(const std::string& id);

  Status PutLayer(const LayerRecord& rec);  // name:tag moves to the new digest
  Result<LayerRecord> GetLayer(const std::string& name, const std::string& tag);
  std::vector<LayerRecord> ListLayers();
  Status RemoveLayer(const std::string& name, const std::string& tag);
  // How many name:tag records point at `digest` (garbage collection of blobs).
  int LayerRefs(const std::string& digest);

  // Small JSON documents by kind and id: tokens, leases.
  Status PutDoc(const std::string& kind, const std::string& id, const nlohmann::json& doc);
  Result<nlohmann::json> GetDoc(const std::string& kind, const std::string& id);
  std::vector<nlohmann::json> ListDocs(const std::string& kind);
  Status RemoveDoc(const std::string& kind, const std::string& id);  // not_found if absent

  // Trajectory steps: (trajectory key, step) -> doc; conflict if the step exists.
  Status InsertStep(const std::string& traj, int64_t step, const std::string& exec_id,
                    const nlohmann::json& doc);
  Result<nlohmann::json> GetStep(const std::string& traj, int64_t step);
  // Rewrites a recorded step's doc (a re-run adds to it); not_found if it is not recorded.
  Status UpdateStep(const std::string& traj, int64_t step, const nlohmann::json& doc);
  std::vector<nlohmann::json> ListSteps(const std::string& traj);
  int64_t MaxStep(const std::string& traj);  // -1 when none
  // The step recorded for `exec_id`: {"traj", "doc"}.
  Result<nlohmann::json> FindStepByExec(const std::string& exec_id);

 private:
  explicit StateStore(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  // One statement at a time on the connection: a statement and the reading of its rows (and
  // sqlite3_changes after it) must not interleave with another's.
  Mutex mu_;
  sqlite3* db_;
  // name:tag -> record, for GetLayer: every fncall call resolves its runner image, and a query
  // (parsed each time) was ~1.4% of all CPU at 300 calls/s. PutLayer and RemoveLayer keep it
  // in step, so layers must be written through the StateStore that reads them (serve has one).
  std::map<std::pair<std::string, std::string>, LayerRecord> layer_cache_ GUARDED_BY(mu_);
};

}  // namespace warren::server
