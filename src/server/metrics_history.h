// The last hour of an API server's figures, for the dashboard's charts: a sample of its
// counters every `interval` (creates and execs with their total seconds, calls, sandboxes by
// state), kept in a ring. Rates and mean latencies are differences of two samples, so a chart
// of an hour costs the server 360 small samples whoever looks, and a page opened now shows the
// hour before it. Each API server samples what it served (a cluster's replicas each keep their
// own, as their /metrics do).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace warren::server {

struct FleetSample {
  double unix_time = 0;
  uint64_t creates = 0;
  double create_seconds = 0;  // summed over `creates`
  uint64_t execs = 0;
  double exec_seconds = 0;
  uint64_t calls = 0;
  std::map<std::string, int64_t> sandboxes;  // by state
};

class MetricsHistory {
 public:
  // `sample` reads the counters; it is called from the history's thread.
  MetricsHistory(std::function<FleetSample()> sample, std::chrono::milliseconds interval,
                 size_t keep);
  ~MetricsHistory();

  void Start();
  void Stop();
  // Takes one sample now (the thread's work; tests call it directly).
  void SampleNow();
  // The samples kept, oldest first, and one taken now at the end.
  std::vector<FleetSample> Samples() const;
  std::chrono::milliseconds interval() const { return interval_; }

 private:
  void Run();

  const std::function<FleetSample()> sample_;
  const std::chrono::milliseconds interval_;
  const size_t keep_;
  mutable Mutex mu_;
  std::deque<FleetSample> ring_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::condition_variable_any cv_;
  std::thread thread_;
};

}  // namespace warren::server
