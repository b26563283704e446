// The SQLite state store of the embedded `warren serve` (server/state_store.h), in WAL mode.
// One connection, a mutex.
#pragma once

#include <sqlite3.h>

#include <map>
#include <memory>
#include <mutex>

#include "base/thread_annotations.h"
#include "server/sqlite_statements.h"
#include "server/state_store.h"

namespace warren::server {

class SqliteStateStore : public StateStore {
 public:
  static Result<std::unique_ptr<SqliteStateStore>> Open(const std::string& path,
                                                        bool durable = false);
  ~SqliteStateStore() override;

  Status PutSandbox(const nlohmann::json& sandbox) override;
  Result<nlohmann::json> GetSandbox(const std::string& id) override;
  Result<std::string> GetSandboxText(const std::string& id) override;
  std::vector<nlohmann::json> ListSandboxes() override;
  Result<std::vector<StoredText>> ReadSandboxTexts() override;
  Status RemoveSandbox(const std::string& id) override;
  Status RemoveSandboxIf(const std::string& id, const std::string& stamp) override;
  // The stamp is the stored text itself: one process writes, so comparing it is enough.
  Result<Stamped> GetSandboxStamped(const std::string& id) override;
  Result<std::string> PutSandboxIf(const nlohmann::json& sandbox,
                                   const std::string& stamp) override;

  Status PutLayer(const LayerRecord& rec) override;
  Result<LayerRecord> GetLayer(const std::string& name, const std::string& tag) override;
  std::vector<LayerRecord> ListLayers() override;
  Status RemoveLayer(const std::string& name, const std::string& tag) override;
  int LayerRefs(const std::string& digest) override;

  Status PutDoc(const std::string& kind, const std::string& id, const nlohmann::json& doc) override;
  Result<nlohmann::json> GetDoc(const std::string& kind, const std::string& id) override;
  Result<std::vector<nlohmann::json>> ListDocs(const std::string& kind) override;
  Status RemoveDoc(const std::string& kind, const std::string& id) override;

  Status InsertStep(const std::string& traj, int64_t step, const std::string& exec_id,
                    const nlohmann::json& doc) override;
  Result<nlohmann::json> GetStep(const std::string& traj, int64_t step) override;
  Status UpdateStep(const std::string& traj, int64_t step, const nlohmann::json& doc) override;
  std::vector<nlohmann::json> ListSteps(const std::string& traj) override;
  int64_t MaxStep(const std::string& traj) override;
  Result<nlohmann::json> FindStepByExec(const std::string& exec_id) override;

 private:
  explicit SqliteStateStore(sqlite3* db)
      : db_(db), stmts_(std::make_unique<SqliteStatements>(db)) {}
  Status Exec(const char* sql);
  // One statement at a time on the connection: a statement and the reading of its rows (and
  // sqlite3_changes after it) must not interleave with another's.
  Mutex mu_;
  sqlite3* db_;
  // Every query's statement, compiled once (used under mu_ only).
  std::unique_ptr<SqliteStatements> stmts_ PT_GUARDED_BY(mu_);
  // name:tag -> record, for GetLayer: every fncall call resolves its runner image, and a query
  // (parsed each time) was ~1.4% of all CPU at 300 calls/s. PutLayer and RemoveLayer keep it
  // in step, so layers must be written through the StateStore that reads them (serve has one).
  std::map<std::pair<std::string, std::string>, LayerRecord> layer_cache_ GUARDED_BY(mu_);
};

}  // namespace warren::server
