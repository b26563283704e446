#include "cluster/node_reports.h"

#include <algorithm>
#include <atomic>

namespace warren::cluster {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

NodeReports::NodeReports(std::function<std::vector<std::string>()> names,
                         std::function<json(const std::string&)> ask, NodeReportsOptions opts)
    : names_(std::move(names)), ask_(std::move(ask)), opts_(opts) {
  thread_ = std::thread([this] { Loop(); });
}

NodeReports::~NodeReports() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::map<std::string, json> NodeReports::Get() {
  MutexLock lock(&mu_);
  // A round not yet begun will begin after this call: join it; else ask for the next.
  if (asked_ == started_) {
    ++asked_;
    cv_.notify_all();
  }
  const uint64_t want = asked_;
  const Clock::time_point deadline = Clock::now() + opts_.wait;
  while (done_ < want && !stop_ && lock.WaitUntil(cv_, deadline) != std::cv_status::timeout) {
  }
  std::map<std::string, json> out;
  const Clock::time_point oldest = Clock::now() - opts_.keep;
  for (const auto& [name, r] : reports_)
    if (r.at >= oldest) out.emplace(name, r.info);
  return out;
}

void NodeReports::Loop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    if (asked_ == done_) {
      lock.Wait(cv_);
      continue;
    }
    const uint64_t round = started_ = asked_;
    lock.Unlock();
    Round();
    lock.Lock();
    done_ = round;
    cv_.notify_all();
  }
}

void NodeReports::Round() {
  const std::vector<std::string> names = names_();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < names.size();) {
      json info = ask_(names[i]);
      if (!info.is_object()) continue;
      MutexLock lock(&mu_);
      reports_[names[i]] = {std::move(info), Clock::now()};
    }
  };
  std::vector<std::thread> workers;
  const size_t n = std::min<size_t>(names.size(), static_cast<size_t>(opts_.parallel));
  for (size_t i = 1; i < n; ++i) workers.emplace_back(work);
  work();
  for (auto& t : workers) t.join();
  // Nodes that left the cluster leave the reports.
  MutexLock lock(&mu_);
  for (auto it = reports_.begin(); it != reports_.end();)
    it = std::find(names.begin(), names.end(), it->first) == names.end() ? reports_.erase(it)
                                                                         : std::next(it);
}

}  // namespace warren::cluster
