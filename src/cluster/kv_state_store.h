// The API server's state in etcd (server/state_store.h over cluster/kv_store.h), for
// `warren apiserver`: every replica reads and writes the same records. Key layout in
// cluster/keys.h; values are the same JSON documents the SQLite store keeps.
//
// Trajectory steps carry their commands' outputs, and etcd takes at most 1.5 MiB a request: a
// step larger than that is refused (`invalid`, naming the limit) rather than cut.
#pragma once

#include "cluster/kv_store.h"
#include "server/state_store.h"

namespace warren::cluster {

class KvStateStore : public server::StateStore {
 public:
  explicit KvStateStore(KvStore* kv) : kv_(kv) {}

  Status PutSandbox(const nlohmann::json& sandbox) override;
  Result<nlohmann::json> GetSandbox(const std::string& id) override;
  std::vector<nlohmann::json> ListSandboxes() override;
  Status RemoveSandbox(const std::string& id) override;
  // The stamp is the key's mod revision; the write compares it in one transaction.
  Result<Stamped> GetSandboxStamped(const std::string& id) override;
  Status PutSandboxIf(const nlohmann::json& sandbox, const std::string& stamp) override;

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

  KvStore* const kv_;
};

}  // namespace warren::cluster
