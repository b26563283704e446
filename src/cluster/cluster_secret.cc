#include "cluster/cluster_secret.h"

#include "base/ids.h"
#include "cluster/keys.h"

namespace warren::cluster {

namespace {

// The value at `key`, made `fresh` by compare-and-swap if there is none: two roles starting
// at once agree on one.
Result<std::string> LoadOrCreate(KvStore* kv, const std::string& key, const std::string& fresh,
                                 const char* what) {
  Txn txn;
  txn.compare.push_back(Compare::Missing(key));
  txn.success.push_back(TxnOp::Put(key, fresh));
  txn.failure.push_back(TxnOp::Get(key));
  auto r = WARREN_TRY(kv->Commit(txn));
  if (r.succeeded) return fresh;
  if (r.gets.empty() || r.gets[0].kvs.empty())
    return Internal(std::string("load ") + what, key, "missing after a failed create");
  const std::string& value = r.gets[0].kvs[0].value;
  if (value.size() < 32)
    return Invalid(std::string("load ") + what + ": the stored value is too short", key);
  return value;
}

}  // namespace

Result<std::string> LoadOrCreateClusterSecret(KvStore* kv) {
  return LoadOrCreate(kv, keys::kSecret, RandomHex(32), "cluster secret");
}

Result<std::string> LoadOrCreateClusterAdminToken(KvStore* kv) {
  return LoadOrCreate(kv, keys::kAdminToken, "wt_" + RandomHex(24), "cluster admin token");
}

}  // namespace warren::cluster
