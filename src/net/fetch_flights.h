// Collapsed requests: concurrent misses for one cache key wait for one upstream fetch. The
// first client to miss leads (it fetches, streams to itself and stores); the others follow
// its flight: once the leader knows it is storing a body of known length, followers are
// served from the file as it grows; when the leader ends, followers look in the cache (a
// revalidated or stored copy is there) or, if nothing was stored (an error, an answer that
// must not be cached), fetch for themselves. So a burst of 50 sandboxes asking for the same
// packument costs one upstream request, and none of them waits for the whole body first.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/thread_annotations.h"
#include "net/package_cache.h"

namespace warren::net {

class Flight {
 public:
  // Leader: the answer is being stored as `meta` (its size known); `body` reads the file as it
  // grows. Followers may start sending it.
  void Streaming(CacheEntry meta, std::shared_ptr<UniqueFd> body);
  // Leader: `total` bytes of the body are in the file.
  void Wrote(uint64_t total);
  // Leader: done. `stored`: the cache now holds a current copy (stored or revalidated).
  void Finish(bool stored);

  enum class Seen { kStreaming, kFinished, kTimedOut };
  // Follower: waits until the body streams or the leader finishes; `meta` when streaming.
  Seen WaitForAnswer(int timeout_ms, CacheEntry* meta);
  // Follower: waits until more than `have` bytes are in the file, the flight ends or the
  // timeout passes; returns how many are. `finished`/`stored` as Finish said.
  uint64_t WaitForBytes(uint64_t have, int timeout_ms, bool* finished, bool* stored);
  bool stored() const;

 private:
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  bool streaming_ GUARDED_BY(mu_) = false;
  bool finished_ GUARDED_BY(mu_) = false;
  bool stored_ GUARDED_BY(mu_) = false;
  uint64_t written_ GUARDED_BY(mu_) = 0;
  CacheEntry meta_ GUARDED_BY(mu_);
};

class FetchFlights {
 public:
  // The flight for `key`: a new one (`*leader` true: this caller fetches) or the one under way.
  std::shared_ptr<Flight> Join(const std::string& key, bool* leader);
  // The leader's end: removes the flight (the next miss starts a new one), then tells its
  // followers. Called by Leading's destructor.
  void End(const std::string& key, const std::shared_ptr<Flight>& flight, bool stored);
  size_t in_flight() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Flight>> flights_ GUARDED_BY(mu_);
};

// A leader's flight, ended whichever way its fetch ends.
class Leading {
 public:
  Leading(FetchFlights* flights, std::string key, std::shared_ptr<Flight> flight)
      : flights_(flights), key_(std::move(key)), flight_(std::move(flight)) {}
  Leading(const Leading&) = delete;
  Leading& operator=(const Leading&) = delete;
  ~Leading() { flights_->End(key_, flight_, stored_); }
  Flight* operator->() { return flight_.get(); }
  void MarkStored() { stored_ = true; }

 private:
  FetchFlights* flights_;
  std::string key_;
  std::shared_ptr<Flight> flight_;
  bool stored_ = false;
};

}  // namespace warren::net
