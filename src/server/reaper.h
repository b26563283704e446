// The end of a sandbox's life that no request asks for: its ttl_s passed, or its
// idle_timeout_s with no API use and no command running. A background thread checks twice a
// second and hands each due sandbox to `remove` (the API's delete, with the daemon's rights);
// `tick` runs on the same thread for the other timed duties (leases that expired).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "base/thread_annotations.h"

namespace warren::server {

class SandboxReaper {
 public:
  struct Hooks {
    std::function<int(const std::string& id)> running_execs;  // a sandbox so busy is not idle
    std::function<void(const std::string& id)> remove;
    std::function<void()> tick;
  };
  explicit SandboxReaper(Hooks hooks) : hooks_(std::move(hooks)) {}
  ~SandboxReaper() { Stop(); }

  void Start();
  void Stop();

  // Sandbox `id` ends `ttl_s` seconds from now, or once unused for `idle_timeout_s`.
  void Track(const std::string& id, double ttl_s, std::optional<double> idle_timeout_s);
  void Forget(const std::string& id);
  bool Tracked(const std::string& id);
  // Sandbox `id` was used now (its idle timeout starts again).
  void Touch(const std::string& id);

  // One pass, as the thread makes twice a second: hands over every sandbox due at `now`
  // (monotonic seconds) and runs `tick`. Public for tests, which drive the clock.
  void Sweep(double now);

 private:
  void Loop();

  const Hooks hooks_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::map<std::string, double> deadlines_ GUARDED_BY(mu_);  // id -> monotonic deadline
  struct Idle {
    double timeout = 0, last = 0;  // seconds; monotonic time of the last use
  };
  std::map<std::string, Idle> idle_ GUARDED_BY(mu_);  // sandboxes with an idle_timeout_s
};

}  // namespace warren::server
