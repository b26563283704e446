// ExpirySweeper: ends every sandbox of the cluster whose ttl_s has passed, or (with SetIdle)
// whose idle_timeout_s has (cluster/idle_index.h), whichever API server made it and whether or
// not that one still runs.
//
// Each record's deadline (created_at + ttl_s) is indexed in etcd, written in the transaction
// that inserts the record and deleted in the one that removes it (kv_state_store.cc,
// /warren/expiry/DEADLINE_MS/ID): what is due is one range read up to now, not a list of every
// record (at 380,000 live sandboxes that list is ~400 MB). One replica sweeps at a time: the
// leader key /warren/leaders/expiry is held under the replica's presence lease
// (cluster/presence.h), so when the leader dies its lease ends within seconds and the next
// replica to try takes over. Replicas that are not leading only try to take the key.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "base/status.h"
#include "cluster/kv_store.h"

namespace warren::cluster {

class ExpirySweeper {
 public:
  // `lease()`: the replica's presence lease now (0 while it has none). `expire(id)`: deletes
  // the sandbox (the API's delete, with the daemon's rights); not_found when the record is
  // gone, which drops a stale index entry.
  ExpirySweeper(KvStore* kv, std::string me, std::function<int64_t()> lease,
                std::function<Status(const std::string& id)> expire);

  // Idle timeouts too: `end_if_idle(id)` deletes the sandbox unless a command runs in it (or
  // its node is out of reach), answering whether it did; not_found when it is gone.
  void SetIdle(std::function<Result<bool>(const std::string& id)> end_if_idle) {
    end_if_idle_ = std::move(end_if_idle);
  }

  // One pass (the API server makes one a second): takes the leader key if no one holds it;
  // if leading, hands every sandbox due at `now_ms` (Unix milliseconds; at most kPerPass) to
  // `expire`, and every sandbox idle then to `end_if_idle`. Returns how many it ended.
  int Sweep(int64_t now_ms);
  bool leading() const { return leading_.load(); }

  static constexpr int64_t kPerPass = 500;
  static constexpr size_t kReadsPerTxn = 100;

 private:
  bool Lead();
  int SweepIdle(int64_t now_ms);

  KvStore* const kv_;
  const std::string me_;
  const std::function<int64_t()> lease_;
  const std::function<Status(const std::string&)> expire_;
  std::function<Result<bool>(const std::string&)> end_if_idle_;
  std::atomic<bool> leading_{false};
};

}  // namespace warren::cluster
