// EtcdClient: KvStore over etcd's v3 JSON gateway (POST /v3/kv/range, put, txn, deleterange,
// /v3/lease/grant|keepalive|revoke, /v3/watch) with libcurl: no gRPC stubs to generate. One
// client serves every thread: each request borrows a curl handle (and its keep-alive
// connection) from a pool; each watch runs on a thread of its own.
//
// Several endpoints (the members of an etcd cluster): a request goes to the member that last
// answered and moves on to the next when a member cannot be reached or has no leader, round
// after round until its retry budget is spent. A write whose answer was lost after it was sent
// is not repeated (it may have happened): the caller gets kUnavailable and decides, usually by
// reading back.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "cluster/kv_store.h"

namespace warren::cluster {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // http://HOST:PORT, at least one
  int connect_timeout_ms = 1000;
  int request_timeout_ms = 5000;  // one try on one member
  // How long a request that can be sent again keeps going round the members, backing off
  // between rounds: through an election (a member holds a read that reached it without a
  // leader for up to 5 s + 2 election timeouts before it answers) and a member restarting.
  int retry_budget_ms = 12000;
};

// "http://a:2379,http://b:2379" -> options (each must be http:// or https://HOST:PORT).
Result<EtcdOptions> ParseEtcdEndpoints(const std::string& urls);

class EtcdClient : public KvStore {
 public:
  explicit EtcdClient(EtcdOptions options);
  ~EtcdClient() override;

  Result<RangeResult> Range(const RangeRequest& req) override;
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0) override;
  Result<int64_t> Delete(const std::string& key, const std::string& range_end = "") override;
  Result<TxnResult> Commit(const Txn& txn) override;
  Result<int64_t> GrantLease(int64_t ttl_s) override;
  Result<int64_t> KeepAlive(int64_t lease) override;
  Status RevokeLease(int64_t lease) override;
  Result<std::unique_ptr<Watch>> WatchRange(const std::string& key, const std::string& range_end,
                                            int64_t start_revision,
                                            WatchCallbacks callbacks) override;

  // Forgets history before `revision` (watches from earlier end); etcd's own
  // --auto-compaction-retention does this in production.
  Status Compact(int64_t revision);

  const EtcdOptions& options() const { return options_; }
  // Requests sent and bytes of their bodies, since start (bench/cluster.py reports them per
  // create).
  struct Counters {
    uint64_t requests = 0, writes = 0, request_bytes = 0;
  };
  Counters counters() const;

 private:
  // Whether a request may be sent again after its answer was lost (reads, lease renewals).
  enum class Retry { kIdempotent, kOnlyIfUnsent };
  Result<nlohmann::json> Call(const char* path, const nlohmann::json& body, Retry retry,
                              const std::string& op, const std::string& object);
  class HandlePool;
  class EtcdWatch;

  const EtcdOptions options_;
  std::unique_ptr<HandlePool> handles_;
  std::atomic<size_t> preferred_{0};  // the endpoint that last answered
  std::atomic<uint64_t> requests_{0}, writes_{0}, request_bytes_{0};
};

}  // namespace warren::cluster
