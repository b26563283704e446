#include "server/histogram.h"

#include <sstream>

namespace warren::server {

void Histogram::Observe(double s) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < std::size(kBuckets); ++i)
    if (s <= kBuckets[i]) ++counts_[i];
  ++total_;
  sum_ += s;
}

Histogram::Totals Histogram::totals() const {
  MutexLock lock(&mu_);
  return {total_, sum_};
}

std::string Histogram::Render(const std::string& name) const {
  MutexLock lock(&mu_);
  std::ostringstream o;
  o << "# TYPE " << name << " histogram\n";
  for (size_t i = 0; i < std::size(kBuckets); ++i)
    o << name << "_bucket{le=\"" << kBuckets[i] << "\"} " << counts_[i] << "\n";
  o << name << "_bucket{le=\"+Inf\"} " << total_ << "\n";
  o << name << "_sum " << sum_ << "\n" << name << "_count " << total_ << "\n";
  return o.str();
}

}  // namespace warren::server
