// The API server's state in etcd (server/state_store.h over cluster/kv_store.h), for
// `warren apiserver`: every replica reads and writes the same records. Key layout in
// cluster/keys.h; values are the same JSON documents the SQLite store keeps.
//
// Shares are counted in etcd (server/shares.h): every write of a record puts or deletes its
// share key (/warren/shares/OWNER/ID) in the same transaction, by the record's state, and an
// insert within limits compares "no share key of the owner written since the sum was read"
// with the insert: two replicas cannot both grant an owner's last slot, and no crash leaves a
// share counted without its record. A record in `creating` also has /warren/creating/ID,
// naming the API server making it: a record whose maker is gone is an orphan to clean up.
//
// Trajectory steps carry their commands' outputs, and etcd takes at most 1.5 MiB a request: a
// step larger than that is refused (`invalid`, naming the limit) rather than cut.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cluster/kv_store.h"
#include "server/state_store.h"

namespace warren::cluster {

class KvStateStore : public server::StateStore {
 public:
  // `api_server`: this replica's name in /warren/apiservers/ (cluster/presence.h), recorded
  // with each create it makes.
  explicit KvStateStore(KvStore* kv, std::string api_server = "")
      : kv_(kv), api_server_(std::move(api_server)) {}

  Status PutSandbox(const nlohmann::json& sandbox) override;
  Result<nlohmann::json> GetSandbox(const std::string& id) override;
  Result<std::string> GetSandboxText(const std::string& id) override;
  std::vector<nlohmann::json> ListSandboxes() override;  // logs an error, answers empty
  Result<std::vector<nlohmann::json>> ReadSandboxes() override;
  Result<std::vector<StoredText>> ReadSandboxTexts() override;
  Status RemoveSandbox(const std::string& id) override;
  // The stamp is the key's mod revision; the write compares it in one transaction.
  Result<Stamped> GetSandboxStamped(const std::string& id) override;
  Result<std::string> PutSandboxIf(const nlohmann::json& sandbox,
                                   const std::string& stamp) override;
  Status RemoveSandboxIf(const std::string& id, const std::string& stamp) override;
  Result<std::string> InsertSandbox(const nlohmann::json& sandbox,
                                    const server::ShareLimits& limits) override;
  bool CountsShares() const override { return true; }
  Result<server::Share> ShareOf(const std::string& owner) override;
  Result<std::vector<std::string>> OrphanedCreates() override;

  Status PutLayer(const server::LayerRecord& rec) override;
  Result<server::LayerRecord> GetLayer(const std::string& name, const std::string& tag) override;
  std::vector<server::LayerRecord> ListLayers() override;
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
  // Every value under `prefix` parsed as JSON (in key order); a value that does not parse is
  // logged and left out, an unreachable store logged and answered as empty.
  std::vector<nlohmann::json> ListJson(const std::string& prefix, const char* what);
  Result<nlohmann::json> GetJson(const std::string& key, const std::string& kind,
                                 const std::string& id);

  // The writes that go with the record `sandbox` (its share and creating keys), after it.
  // `inserting`: the record is new, and its deadline goes into the TTL index
  // (cluster/expiry_sweeper.h); it never changes, so later writes leave the index alone.
  std::vector<TxnOp> RecordOps(const nlohmann::json& sandbox, const std::string& value,
                               bool inserting);
  // The owner's share as of the range's revision.
  Result<std::pair<server::Share, int64_t>> ReadShare(const std::string& owner);
  // The record's keys beside its own, by id alone: found from the stored record's owner.
  Status RemoveWith(const std::string& id, const std::vector<Compare>& compare);

  KvStore* const kv_;
  const std::string api_server_;
};

}  // namespace warren::cluster
