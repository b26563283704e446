// The egress proxy's shared cache of package downloads and registry metadata: storage only
// (what is kept and for how long is net/cache_policy.h). One file per entry under the cache
// directory, named by its key's digest, with its metadata beside it; least recently used
// entries go when the cache is over its size. A body being written can be read as it grows
// (Writer::OpenReader), so clients that asked for it at the same time are served while it
// arrives (net/fetch_flights.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "net/cache_policy.h"

namespace warren::net {

struct CacheEntry {
  std::string key;  // net::CacheKey: the URL, and what else the answer varies by
  CacheKind kind = CacheKind::kNone;
  Registry registry = Registry::kOther;
  // When upstream last said this copy is current (wall clock, ms since the epoch): stored,
  // or revalidated with a 304.
  int64_t validated_ms = 0;
  int status = 200;
  std::map<std::string, std::string> headers;  // Content-Type, ETag, Last-Modified, ...
  uint64_t size = 0;
  std::shared_ptr<UniqueFd> body;  // opened by Lookup: an eviction or replacement after it
                                   // cannot mix this entry's headers with another body
};

class PackageCache {
 public:
  PackageCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  Status Init();

  std::optional<CacheEntry> Lookup(const std::string& key);
  // Upstream confirmed the stored copy (a 304): it is current as of `validated_ms`.
  void Revalidated(const CacheEntry& entry, int64_t validated_ms);

  // A new entry being written while the response streams to the client.
  class Writer {
   public:
    ~Writer();  // not committed: removed
    bool Append(const char* data, size_t n);
    // Another descriptor of the body being written, for readers that follow it as it grows
    // (it stays valid after Commit renames the file, and after an abandoned write).
    std::shared_ptr<UniqueFd> OpenReader() const;
    // Makes the entry visible (replacing an older one) if `size` bytes were written.
    bool Commit(CacheEntry meta);

   private:
    friend class PackageCache;
    PackageCache* cache_ = nullptr;
    std::string key_, tmp_;
    UniqueFd fd_;
    uint64_t written_ = 0;
    bool failed_ = false, done_ = false;
  };
  std::unique_ptr<Writer> Begin(const std::string& key);

  uint64_t bytes() const { return total_.load(); }
  uint64_t entries() const { return entries_.load(); }

 private:
  std::string Path(const std::string& key) const;
  bool WriteMeta(const std::string& path, const CacheEntry& meta);
  void EvictIfFull();

  std::string dir_;
  uint64_t max_bytes_;
  std::atomic<uint64_t> total_{0}, entries_{0};
  std::mutex evict_mu_;
};

}  // namespace warren::net
