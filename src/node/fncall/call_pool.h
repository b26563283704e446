// CallService: POST /v1/calls. Keeps a pool of fncall runners per runner image, sized by load
// (a runner is added when every runner is busy, up to max_runners; idle ones beyond one are
// stopped), recycled after `recycle_after` runs or at any sign of damage; compiles once, runs
// each case in a fresh worker, and judges.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "node/fncall/calls.h"
#include "node/fncall/runner.h"
#include "node/node_api.h"

namespace warren::fncall {

struct PoolOptions {
  std::string default_image;  // `warren serve --fncall-image`
  int max_runners = 4;        // per image
  int workers_per_runner = 4;
  int prefork = 2;
  uint64_t recycle_after = 5000;  // runs per runner
  int idle_stop_s = 300;          // a runner beyond the first idle this long is stopped
  uint64_t runner_memory_bytes = 4ull << 30;
  std::string call_seccomp_bpf;
  std::shared_ptr<const std::string> zygote_lib;  // see RunnerConfig
};

// Resolves a runner image NAME:TAG to its layer digests, top first.
using ImageResolver = std::function<Result<std::vector<std::string>>(const std::string& image)>;

class CallService : public Calls {
 public:
  CallService(node::NodeApi* node, ImageResolver resolve, PoolOptions opts);
  ~CallService() override;

  Result<nlohmann::json> Call(const nlohmann::json& request) override;
  Result<nlohmann::json> CallBatch(const nlohmann::json& request) override;
  // One program on a runner of the image made of `layers` (top first): the exec of a fncall
  // sandbox. An error means no runner could run it.
  Result<RunResult> RunLayers(const std::vector<std::string>& layers, const RunRequest& req);
  nlohmann::json Stats() const override;
  void Shutdown() override;

 private:
  // One pool per runner image, keyed by its layer digests.
  struct Pool {
    std::string label;  // NAME:TAG or the digest, for Stats
    std::vector<std::string> layers;
    std::vector<std::shared_ptr<Runner>> runners;
    std::map<Runner*, std::chrono::steady_clock::time_point> last_used;
    int starting = 0;
  };
  // A healthy runner for `layers`, starting one if all are busy (or none exists).
  Result<std::shared_ptr<Runner>> Acquire(const std::vector<std::string>& layers,
                                          const std::string& label);
  Result<std::shared_ptr<Runner>> StartRunner(const std::vector<std::string>& layers,
                                              const std::string& label);
  // Runs on some runner of `layers`; one retry on another runner if this one failed.
  Result<RunResult> RunOn(const std::vector<std::string>& layers, const std::string& label,
                          const RunRequest& req);
  // Runs it once per stdin (Runner::RunCases) on some runner of `layers`; the cases that
  // runner could not run are tried once more, together, on another.
  std::vector<Result<RunResult>> RunCasesOn(const std::vector<std::string>& layers,
                                            const std::string& label, const RunRequest& req,
                                            const std::vector<std::string>& stdins);
  void Retire(const std::shared_ptr<Runner>& r);
  void Maintain();

  node::NodeApi* node_;
  ImageResolver resolve_;
  PoolOptions opts_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, Pool> pools_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Runner>> retiring_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread maintainer_;
  std::atomic<uint64_t> calls_{0}, runs_{0}, runner_starts_{0}, runner_failures_{0};
};

}  // namespace warren::fncall
