// The JSON of etcd's v3 gateway (grpc-gateway over etcdserverpb): requests built from the
// KvStore types and answers parsed into them. Keys and values are base64, int64 fields are
// decimal strings, and fields at their zero value are left out (a missing "succeeded" is
// false). Pure functions, so the whole mapping is unit-tested without an etcd.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/kv_store.h"

namespace warren::cluster::etcd_json {

nlohmann::json RangeBody(const RangeRequest& req);
nlohmann::json PutBody(const std::string& key, const std::string& value, int64_t lease);
nlohmann::json DeleteBody(const std::string& key, const std::string& range_end);
nlohmann::json TxnBody(const Txn& txn);
nlohmann::json WatchCreateBody(const std::string& key, const std::string& range_end,
                               int64_t start_revision);

Result<RangeResult> ParseRange(const nlohmann::json& j);
Result<int64_t> ParseRevision(const nlohmann::json& j);  // header.revision
Result<int64_t> ParseDeleted(const nlohmann::json& j);
Result<TxnResult> ParseTxn(const nlohmann::json& j);
Result<int64_t> ParseLeaseId(const nlohmann::json& j);
// A keepalive answer ({"result": {"ID", "TTL"}}): the TTL, kNotFound when the lease is gone.
Result<int64_t> ParseKeepAlive(const nlohmann::json& j);

// One message of a watch stream.
struct WatchMessage {
  bool created = false;
  bool canceled = false;
  int64_t compact_revision = 0;  // > 0: the start revision was compacted
  int64_t revision = 0;          // the header's: the store's revision when this was sent
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};
Result<WatchMessage> ParseWatchMessage(const nlohmann::json& j);

// An error answer ({"error", "code", "message"}) as a Status for operation `op` on `object`:
// the gRPC code picks the API code (not found, invalid, unavailable, ...).
Status ErrorStatus(const nlohmann::json& j, int http_status, const std::string& op,
                   const std::string& object);

}  // namespace warren::cluster::etcd_json
