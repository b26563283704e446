#include "net/fetch_flights.h"

#include <chrono>

namespace warren::net {

void Flight::Streaming(CacheEntry meta, std::shared_ptr<UniqueFd> body) {
  MutexLock lock(&mu_);
  meta_ = std::move(meta);
  meta_.body = std::move(body);
  streaming_ = true;
  cv_.notify_all();
}

void Flight::Wrote(uint64_t total) {
  MutexLock lock(&mu_);
  written_ = total;
  cv_.notify_all();
}

void Flight::Finish(bool stored) {
  MutexLock lock(&mu_);
  finished_ = true;
  stored_ = stored;
  cv_.notify_all();
}

bool Flight::stored() const {
  MutexLock lock(&mu_);
  return stored_;
}

Flight::Seen Flight::WaitForAnswer(int timeout_ms, CacheEntry* meta) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  MutexLock lock(&mu_);
  for (;;) {
    if (streaming_) {
      *meta = meta_;
      return Seen::kStreaming;
    }
    if (finished_) return Seen::kFinished;
    if (lock.WaitUntil(cv_, deadline) == std::cv_status::timeout && !streaming_ && !finished_)
      return Seen::kTimedOut;
  }
}

uint64_t Flight::WaitForBytes(uint64_t have, int timeout_ms, bool* finished, bool* stored) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  MutexLock lock(&mu_);
  while (written_ <= have && !finished_)
    if (lock.WaitUntil(cv_, deadline) == std::cv_status::timeout) break;
  *finished = finished_;
  *stored = stored_;
  return written_;
}

std::shared_ptr<Flight> FetchFlights::Join(const std::string& key, bool* leader) {
  MutexLock lock(&mu_);
  auto [it, fresh] = flights_.try_emplace(key);
  if (fresh) it->second = std::make_shared<Flight>();
  *leader = fresh;
  return it->second;
}

void FetchFlights::End(const std::string& key, const std::shared_ptr<Flight>& flight, bool stored) {
  {
    MutexLock lock(&mu_);
    if (auto it = flights_.find(key); it != flights_.end() && it->second == flight)
      flights_.erase(it);
  }
  flight->Finish(stored);
}

size_t FetchFlights::in_flight() const {
  MutexLock lock(&mu_);
  return flights_.size();
}

}  // namespace warren::net
