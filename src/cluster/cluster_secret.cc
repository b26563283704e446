#include "cluster/cluster_secret.h"

#include "base/ids.h"
#include "cluster/keys.h"

namespace warren::cluster {

Result<std::string> LoadOrCreateClusterSecret(KvStore* kv) {
  Txn txn;
  txn.compare.push_back(Compare::Missing(keys::kSecret));
  txn.success.push_back(TxnOp::Put(keys::kSecret, RandomHex(32)));
  txn.failure.push_back(TxnOp::Get(keys::kSecret));
  auto r = WARREN_TRY(kv->Commit(txn));
  if (r.succeeded) {
    // Ours won; read it back rather than trust the local copy (one source of truth).
    auto kv_now = WARREN_TRY(kv->Get(keys::kSecret));
    return kv_now.value;
  }
  if (r.gets.empty() || r.gets[0].kvs.empty())
    return Internal("load cluster secret", keys::kSecret, "missing after a failed create");
  const std::string& secret = r.gets[0].kvs[0].value;
  if (secret.size() < 32)
    return Invalid("load cluster secret: the stored secret is too short", keys::kSecret);
  return secret;
}

}  // namespace warren::cluster
