// The API server's durable state, behind one interface: `warren serve` keeps it in SQLite
// (server/sqlite_state_store.h), a cluster's API servers in etcd (cluster/kv_state_store.h).
// Records are JSON documents keyed by id, plus what callers look them up by. Thread-safe.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/shares.h"

namespace warren::server {

struct LayerRecord {
  std::string name, tag, digest, kind, created_at, source;
  uint64_t size = 0;
  nlohmann::json ToJson() const;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // The SQLite store of `warren serve` (server/sqlite_state_store.h). `durable`: every commit
  // is fsynced (synchronous=FULL), for records that must survive a power loss, not only a
  // crash of the daemon (WAL with synchronous=NORMAL).
  static Result<std::unique_ptr<StateStore>> Open(const std::string& path, bool durable = false);

  // Sandboxes: the full API object as JSON, with id and state pulled out. Listed by
  // created_at, then id.
  virtual Status PutSandbox(const nlohmann::json& sandbox) = 0;
  virtual Result<nlohmann::json> GetSandbox(const std::string& id) = 0;
  // The same record as stored, unparsed: a reader that keeps what it parsed before parses it
  // again only if it changed (SandboxTable::Get, on every use of a sandbox).
  virtual Result<std::string> GetSandboxText(const std::string& id) {
    return WARREN_TRY(GetSandbox(id)).dump();
  }
  virtual std::vector<nlohmann::json> ListSandboxes() = 0;
  // The same, or the store's error (a caller that answers a tenant must not take an
  // unreadable store for an empty one).
  virtual Result<std::vector<nlohmann::json>> ReadSandboxes() { return ListSandboxes(); }
  // Every record as stored, unparsed and in no particular order: (id, document text). A
  // reader that keeps what it parsed before parses only the records that changed since.
  struct StoredText {
    std::string id, text;
  };
  virtual Result<std::vector<StoredText>> ReadSandboxTexts() {
    std::vector<StoredText> out;
    for (const auto& j : WARREN_TRY(ReadSandboxes())) out.push_back({j.value("id", ""), j.dump()});
    return out;
  }
  virtual Status RemoveSandbox(const std::string& id) = 0;
  // A sandbox record with the stamp of its version (opaque; it changes with every write).
  struct Stamped {
    nlohmann::json doc;
    std::string stamp;
  };
  virtual Result<Stamped> GetSandboxStamped(const std::string& id) = 0;
  // Writes the record only if it is still at `stamp` ("": only if there is none), else
  // kConflict: a read-modify-write never overwrites a concurrent one (API servers of a
  // cluster change the same records). Returns the stamp of the version written, so that the
  // writer's next change need not read it again.
  virtual Result<std::string> PutSandboxIf(const nlohmann::json& sandbox,
                                           const std::string& stamp) = 0;
  // Removes the record only if it is still at `stamp`, else kConflict (kNotFound if gone).
  virtual Status RemoveSandboxIf(const std::string& id, const std::string& stamp) = 0;

  // Shares (server/shares.h). A store that counts them (a cluster's) inserts a new record only
  // if its owner's records that hold a share, this one included, stay within `limits`, checked
  // and written in one step against every writer; one that does not (warren serve's, whose
  // one process counts them in QuotaTracker) ignores `limits`. kConflict if the id exists.
  // Returns the stamp of the version written.
  virtual Result<std::string> InsertSandbox(const nlohmann::json& sandbox,
                                            const ShareLimits& limits) {
    (void)limits;
    return PutSandboxIf(sandbox, "");
  }
  virtual bool CountsShares() const { return false; }
  // What `owner`'s records hold now (only a store that counts shares knows).
  virtual Result<Share> ShareOf(const std::string& owner) {
    return Status(Code::kUnavailable, "read share", owner, "this store does not count shares");
  }
  // Records left `creating` by an API server that is gone (it died mid-create): another
  // cleans them up. None in a store one process owns.
  virtual Result<std::vector<std::string>> OrphanedCreates() { return std::vector<std::string>{}; }

  virtual Status PutLayer(const LayerRecord& rec) = 0;  // name:tag moves to the new digest
  virtual Result<LayerRecord> GetLayer(const std::string& name, const std::string& tag) = 0;
  virtual std::vector<LayerRecord> ListLayers() = 0;  // by name, then tag
  virtual Status RemoveLayer(const std::string& name, const std::string& tag) = 0;
  // How many name:tag records point at `digest` (garbage collection of blobs).
  virtual int LayerRefs(const std::string& digest) = 0;

  // Small JSON documents by kind and id: tokens, leases. Listed by id.
  virtual Status PutDoc(const std::string& kind, const std::string& id,
                        const nlohmann::json& doc) = 0;
  virtual Result<nlohmann::json> GetDoc(const std::string& kind, const std::string& id) = 0;
  // An error when the store cannot be read (a caller must not take "none" for "unknown").
  virtual Result<std::vector<nlohmann::json>> ListDocs(const std::string& kind) = 0;
  // not_found if absent
  virtual Status RemoveDoc(const std::string& kind, const std::string& id) = 0;

  // Trajectory steps: (trajectory key, step) -> doc; conflict if the step exists.
  virtual Status InsertStep(const std::string& traj, int64_t step, const std::string& exec_id,
                            const nlohmann::json& doc) = 0;
  virtual Result<nlohmann::json> GetStep(const std::string& traj, int64_t step) = 0;
  // Rewrites a recorded step's doc (a re-run adds to it); not_found if it is not recorded.
  virtual Status UpdateStep(const std::string& traj, int64_t step, const nlohmann::json& doc) = 0;
  virtual std::vector<nlohmann::json> ListSteps(const std::string& traj) = 0;  // by step
  virtual int64_t MaxStep(const std::string& traj) = 0;                        // -1 when none
  // The step recorded for `exec_id`: {"traj", "doc"}.
  virtual Result<nlohmann::json> FindStepByExec(const std::string& exec_id) = 0;
};

}  // namespace warren::server
