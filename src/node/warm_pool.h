// Whole container sandboxes made ahead of demand (docs/design.md, "Warm pool"). A create
// whose template (its layers and disk size, network none) has sandboxes waiting takes one and
// only renames it: limits rewritten, hostname and environment sent to its agent, files and
// network record renamed. The filler makes them in the background at the lowest CPU
// priority, sized by demand: a template's first create starts its pool, each create that
// found none doubles its size (up to a cap), quiet minutes halve it again, and a template
// nobody asked for in ten minutes gives its sandboxes back.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "runtime/backend.h"

namespace warren::node {

struct WarmSandbox {
  std::string name;  // "warm-<hex>": its cgroup, runtime files and network record until claimed
  std::unique_ptr<runtime::Instance> instance;
  UniqueFd control;  // the agent's control socket; its "ready" already read
};

struct WarmPoolOptions {
  size_t initial = 2;             // per template, once it has been asked for (0: no pool at all)
  size_t max = 32;                // per template, reached by repeated misses (16x initial at most)
  size_t total_max = 128;         // across templates
  std::chrono::seconds calm{60};  // no miss for this long halves a grown pool
  std::chrono::seconds unused_after{600};  // a template nobody asked for is dropped
  std::chrono::seconds rest{60};           // after 3 failures in a row
};

class WarmPool {
 public:
  using Maker = std::function<Result<WarmSandbox>(const runtime::SandboxConfig& tmpl)>;
  using Discarder = std::function<void(WarmSandbox&)>;
  WarmPool(WarmPoolOptions opts, Maker make, Discarder discard);
  ~WarmPool();  // stops the filler; the sandboxes still waiting are discarded

  // A ready sandbox of template `key`, if one waits. Notes the demand either way, with the
  // config the filler makes the template's sandboxes from.
  std::optional<WarmSandbox> Take(const std::string& key, const runtime::SandboxConfig& tmpl);
  // What the pool holds and how it fared.
  nlohmann::json Info();
  // Every waiting sandbox goes (a test or a shutdown wants a quiet node); templates stay.
  void Drain();

 private:
  using Clock = std::chrono::steady_clock;
  struct Template {
    runtime::SandboxConfig cfg;
    std::deque<WarmSandbox> ready;
    size_t making = 0;
    size_t target = 0;
    Clock::time_point last_asked, last_miss;
    int failures = 0;
    Clock::time_point rest_until;
  };
  void FillLoop();
  size_t TotalTarget() const REQUIRES(mu_);

  const WarmPoolOptions opts_;
  Maker make_;
  Discarder discard_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::map<std::string, Template> templates_ GUARDED_BY(mu_);
  uint64_t hits_ GUARDED_BY(mu_) = 0, misses_ GUARDED_BY(mu_) = 0;
  uint64_t made_ GUARDED_BY(mu_) = 0, failed_ GUARDED_BY(mu_) = 0;
  std::thread filler_;
};

}  // namespace warren::node
