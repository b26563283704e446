// IdleRefresher: an API server's writes of sandbox use to the idle deadlines in etcd
// (cluster/idle_index.h). A use moves the sandbox's deadline unless this replica wrote one for
// it less than a slack ago; the writes of a moment go out together every 250 ms, in
// transactions of up to kPerTxn sandboxes (one that fails, because a sandbox went, is split
// into its sandboxes). A write that fails is tried again with the next flush.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "base/thread_annotations.h"
#include "cluster/kv_store.h"

namespace warren::cluster {

class IdleRefresher {
 public:
  static constexpr size_t kPerTxn = 40;  // 2 puts and a comparison each; etcd allows 128 ops

  // `now_ms`: Unix milliseconds (a clock of the tests' own in unit tests).
  IdleRefresher(KvStore* kv, std::function<int64_t()> now_ms);
  ~IdleRefresher();  // Stop()

  // Sandbox `id`, of idle timeout `timeout_s`, was used now.
  void Touch(const std::string& id, double timeout_s);
  // Writes what is waiting (the thread does every 250 ms); returns how many sandboxes' deadlines
  // were written.
  int Flush();
  void Start();
  void Stop();  // after a last flush

 private:
  struct Pending {
    int64_t deadline_ms = 0, timeout_ms = 0;
  };
  Status Write(const std::vector<std::pair<std::string, Pending>>& batch);
  void Loop();

  KvStore* const kv_;
  const std::function<int64_t()> now_ms_;
  Mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, int64_t> written_ GUARDED_BY(mu_);  // id -> when we last wrote (ms)
  std::map<std::string, Pending> pending_ GUARDED_BY(mu_);
  int64_t pruned_ms_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace warren::cluster
