// A Prometheus histogram with fixed buckets (seconds), safe to observe from any thread.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>

#include "base/thread_annotations.h"

namespace warren::server {

class Histogram {
 public:
  void Observe(double seconds);
  // The histogram in the text exposition format, as metric `name`.
  std::string Render(const std::string& name) const;
  // Observations so far and their sum (seconds).
  struct Totals {
    uint64_t count = 0;
    double sum = 0;
  };
  Totals totals() const;

 private:
  // From 100 us: placement and reservations are measured here too, and their goal is in ms.
  static constexpr double kBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  mutable Mutex mu_;
  uint64_t counts_[std::size(kBuckets)] GUARDED_BY(mu_) = {};
  uint64_t total_ GUARDED_BY(mu_) = 0;
  double sum_ GUARDED_BY(mu_) = 0;
};

}  // namespace warren::server
