// A token bucket per key (a sandbox id): `burst` at once, `per_second` after that. For what a
// client may ask of one sandbox's agent as often as it likes (screenshots, input), so that
// one client cannot keep an agent busy for everyone else using that sandbox.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <string>

namespace warren::server {

class RateGate {
 public:
  RateGate(double per_second, double burst) : rate_(per_second), burst_(burst) {}

  // Takes one token for `key`; when none is left, false and how many seconds until one is.
  bool Take(const std::string& key, int* retry_after_s) {
    std::lock_guard lock(mu_);
    const double now = Now();
    if (buckets_.size() > kMaxKeys) Forget(now);
    auto [it, fresh] = buckets_.try_emplace(key, Bucket{burst_, now});
    Bucket& b = it->second;
    b.tokens = std::min(burst_, b.tokens + (now - b.at) * rate_);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return true;
    }
    *retry_after_s = std::max(1, static_cast<int>(std::ceil((1 - b.tokens) / rate_)));
    return false;
  }

 private:
  struct Bucket {
    double tokens;
    double at;
  };
  static constexpr size_t kMaxKeys = 10000;
  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Buckets full again are the same as none.
  void Forget(double now) {
    for (auto it = buckets_.begin(); it != buckets_.end();)
      it = it->second.tokens + (now - it->second.at) * rate_ >= burst_ ? buckets_.erase(it) : ++it;
  }

  const double rate_, burst_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace warren::server
