#include "server/metrics_history.h"

#include "base/ids.h"

namespace warren::server {

MetricsHistory::MetricsHistory(std::function<FleetSample()> sample,
                               std::chrono::milliseconds interval, size_t keep)
    : sample_(std::move(sample)), interval_(interval), keep_(keep) {}

MetricsHistory::~MetricsHistory() { Stop(); }

void MetricsHistory::Start() {
  MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void MetricsHistory::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MetricsHistory::SampleNow() {
  FleetSample s = sample_();  // outside the lock: it reads other objects' counters
  s.unix_time = UnixNow();
  MutexLock lock(&mu_);
  ring_.push_back(std::move(s));
  while (ring_.size() > keep_) ring_.pop_front();
}

std::vector<FleetSample> MetricsHistory::Samples() const {
  FleetSample now = sample_();
  now.unix_time = UnixNow();
  MutexLock lock(&mu_);
  std::vector<FleetSample> out(ring_.begin(), ring_.end());
  out.push_back(std::move(now));
  return out;
}

void MetricsHistory::Run() {
  for (;;) {
    SampleNow();
    MutexLock lock(&mu_);
    if (lock.WaitFor(cv_, interval_, [this]() REQUIRES(mu_) { return stop_; })) return;
  }
}

}  // namespace warren::server
