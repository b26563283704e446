#include "server/reaper.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/ids.h"

namespace warren::server {

void SandboxReaper::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void SandboxReaper::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SandboxReaper::Track(const std::string& id, double ttl_s,
                          std::optional<double> idle_timeout_s) {
  const double now = NowSeconds();
  MutexLock lock(&mu_);
  deadlines_[id] = now + std::max(0.0, ttl_s);
  if (idle_timeout_s) idle_[id] = {*idle_timeout_s, now};
}

void SandboxReaper::Forget(const std::string& id) {
  MutexLock lock(&mu_);
  deadlines_.erase(id);
  idle_.erase(id);
}

bool SandboxReaper::Tracked(const std::string& id) {
  MutexLock lock(&mu_);
  return deadlines_.count(id) > 0;
}

void SandboxReaper::Touch(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = idle_.find(id);
  if (it != idle_.end()) it->second.last = NowSeconds();
}

void SandboxReaper::Loop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    lock.WaitFor(cv_, std::chrono::milliseconds(500));
    if (stop_) break;
    lock.Unlock();
    Sweep(NowSeconds());
    lock.Lock();
  }
}

void SandboxReaper::Sweep(double now) {
  std::vector<std::string> due, idle;
  {
    MutexLock lock(&mu_);
    for (auto& [id, deadline] : deadlines_)
      if (deadline <= now) due.push_back(id);
    for (auto& [id, i] : idle_)
      if (now - i.last >= i.timeout) idle.push_back(id);
  }
  // Idle: no API use for idle_timeout_s and no command running.
  for (const auto& id : idle) {
    if (hooks_.running_execs(id) > 0) {  // busy: idle from now on, if it stays so
      MutexLock lock(&mu_);
      if (auto it = idle_.find(id); it != idle_.end()) it->second.last = now;
      continue;
    }
    spdlog::info("sandbox {} idle for its idle_timeout_s: deleting", id);
    if (!std::count(due.begin(), due.end(), id)) due.push_back(id);
  }
  if (hooks_.tick) hooks_.tick();
  for (const auto& id : due) {
    hooks_.remove(id);
    Forget(id);
  }
}

}  // namespace warren::server
