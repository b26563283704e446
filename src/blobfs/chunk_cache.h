// ChunkCache: a node's content-addressed cache of layer chunks, shared by every layer, version
// and sandbox on the node, bounded by LRU eviction between two watermarks.
//
// Files live at STORE/chunks/sha256/<ab>/<hex> (the layout of every layer store, see
// image/layer_store.h), written under a private name and renamed, never fsynced: the cache is
// rebuilt from the store after a crash, and a chunk found at start is verified against its
// name the first time it is read, so a torn write is refetched rather than served. When the
// cache passes `high` bytes, the least recently used chunks are removed until it is at `low`.
// A chunk that cannot be written (the disk is full) is still served from memory by the caller;
// the cache only counts the failure. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace warren::blobfs {

struct CacheCounters {
  uint64_t bytes = 0;   // held now
  uint64_t chunks = 0;  // held now
  uint64_t high = 0, low = 0;
  uint64_t evictions = 0;
  uint64_t write_errors = 0;
  uint64_t corrupt = 0;  // found at start, failed verification on first read, removed
};

class ChunkCache {
 public:
  // `store_root` is the node's layer store directory. high 0: unbounded.
  ChunkCache(std::string store_root, uint64_t high, uint64_t low);

  // Indexes the chunks already on disk (oldest mtime first in LRU order).
  Status Load();
  // Reads `n` bytes at `off` of chunk `hex` (whose full length is `length`) into `out`.
  // False when the chunk is not cached (or was found corrupt and removed).
  bool Read(const std::string& hex, uint64_t length, uint64_t off, size_t n, char* out);
  // Adds a verified chunk, then evicts down to the low watermark if above the high one.
  void Insert(const std::string& hex, std::string_view bytes);
  bool Has(const std::string& hex);
  CacheCounters Counters() const;
  std::string PathOf(const std::string& hex) const;

 private:
  struct Entry {
    uint64_t size = 0;
    bool verified = false;
    std::list<std::string>::iterator lru;
  };
  void Touch(Entry& e, const std::string& hex) REQUIRES(mu_);
  void Drop(const std::string& hex) REQUIRES(mu_);
  void EvictLocked() REQUIRES(mu_);
  bool VerifyFile(const std::string& hex, uint64_t length);

  const std::string root_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
  std::list<std::string> lru_ GUARDED_BY(mu_);  // front: least recently used
  CacheCounters counters_ GUARDED_BY(mu_);
};

}  // namespace warren::blobfs
