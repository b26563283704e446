#include "node/warm_pool.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <vector>

#include "sys/sched_priority.h"

namespace warren::node {

WarmPool::WarmPool(WarmPoolOptions opts, Maker make, Discarder discard)
    : opts_(opts), make_(std::move(make)), discard_(std::move(discard)) {
  if (opts_.initial > 0) filler_ = std::thread([this] { FillLoop(); });
}

WarmPool::~WarmPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (filler_.joinable()) filler_.join();
  Drain();
}

void WarmPool::Drain() {
  std::vector<WarmSandbox> gone;
  {
    MutexLock lock(&mu_);
    for (auto& [key, t] : templates_)
      while (!t.ready.empty()) gone.push_back(std::move(t.ready.front())), t.ready.pop_front();
  }
  for (auto& w : gone) discard_(w);
}

size_t WarmPool::TotalTarget() const {
  size_t n = 0;
  for (const auto& [key, t] : templates_) n += t.target;
  return n;
}

std::optional<WarmSandbox> WarmPool::Take(const std::string& key,
                                          const runtime::SandboxConfig& tmpl) {
  if (opts_.initial == 0) return std::nullopt;
  std::optional<WarmSandbox> out;
  {
    MutexLock lock(&mu_);
    const auto now = Clock::now();
    auto [it, fresh] = templates_.try_emplace(key);
    Template& t = it->second;
    t.last_asked = now;
    if (fresh) {
      t.cfg = tmpl;
      t.cfg.id.clear();
      t.cfg.hostname.clear();
      t.cfg.env.clear();  // each create sends its own
      t.cfg.files.clear();
      t.last_miss = now;
    }
    if (!t.ready.empty()) {
      // The one made last: its agent ran most recently, so its pages are still in the caches
      // (and, on a guest whose page tables the hypervisor shadows, in the shadow), and the
      // node's idle reclaim has had the least time to page it out. One left waiting longest
      // costs no more memory than another.
      out = std::move(t.ready.back());
      t.ready.pop_back();
      ++hits_;
    } else {
      ++misses_;
      t.last_miss = now;
      // A miss: demand outran the pool. Grow it, within the caps.
      const size_t others = TotalTarget() - t.target;
      size_t want = std::min(opts_.max, std::max(opts_.initial, t.target * 2));
      if (others + want > opts_.total_max)
        want = opts_.total_max > others ? opts_.total_max - others : 0;
      t.target = std::max(t.target, want);
    }
  }
  cv_.notify_all();
  return out;
}

void WarmPool::FillLoop() {
  // Filling is background work: this thread (the node's half of each create) at the lowest
  // priority too, besides the sandboxes' agents (SandboxConfig::background).
  if (Status st = sys::SetBackgroundPriority(0); !st.ok())
    spdlog::warn("warm pool: {}", st.ToString());
  MutexLock lock(&mu_);
  while (!stop_) {
    const auto now = Clock::now();
    std::vector<WarmSandbox> gone;
    std::string pick;
    for (auto it = templates_.begin(); it != templates_.end();) {
      Template& t = it->second;
      if (now - t.last_asked > opts_.unused_after && t.making == 0) {
        for (auto& w : t.ready) gone.push_back(std::move(w));
        it = templates_.erase(it);
        continue;
      }
      if (t.target > opts_.initial && now - t.last_miss > opts_.calm) {
        t.target = std::max(opts_.initial, t.target / 2);
        t.last_miss = now;  // the next halving after another calm period
      }
      if (pick.empty() && t.ready.size() + t.making < t.target && now >= t.rest_until)
        pick = it->first;
      ++it;
    }
    if (!gone.empty()) {
      lock.Unlock();
      for (auto& w : gone) discard_(w);
      lock.Lock();
      continue;
    }
    if (pick.empty()) {
      // Woken by every take; the timeout only paces the calm and unused checks above.
      lock.WaitFor(cv_, std::chrono::seconds(1));
      continue;
    }
    Template& t = templates_[pick];
    runtime::SandboxConfig cfg = t.cfg;
    ++t.making;
    lock.Unlock();
    auto made = make_(cfg);
    lock.Lock();
    auto it = templates_.find(pick);  // still there: a template being made is never dropped
    Template& t2 = it->second;
    --t2.making;
    if (made.ok()) {
      ++made_;
      t2.failures = 0;
      if (stop_) {
        lock.Unlock();
        discard_(*made);
        lock.Lock();
      } else {
        t2.ready.push_back(std::move(*made));
      }
    } else {
      ++failed_;
      spdlog::warn("warm pool: making a sandbox: {}", made.status().ToString());
      if (++t2.failures >= 3) {
        t2.failures = 0;
        t2.rest_until = Clock::now() + opts_.rest;
      }
    }
  }
}

nlohmann::json WarmPool::Info() {
  MutexLock lock(&mu_);
  size_t ready = 0, making = 0, target = 0;
  for (const auto& [key, t] : templates_)
    ready += t.ready.size(), making += t.making, target += t.target;
  return {{"per_template", opts_.initial},
          {"templates", templates_.size()},
          {"ready", ready},
          {"making", making},
          {"target", target},
          {"hits", hits_},
          {"misses", misses_},
          {"made", made_},
          {"failed", failed_}};
}

}  // namespace warren::node
