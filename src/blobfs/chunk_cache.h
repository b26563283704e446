// ChunkCache: a node's content-addressed cache of layer chunks, shared by every layer, version
// and sandbox on the node, bounded by LRU eviction between two watermarks.
//
// Files live at STORE/chunks/sha256/<ab>/<hex> (the layout of every layer store, see
// image/layer_store.h), written under a private name and renamed, never fsynced: the cache is
// rebuilt from the store after a crash, and a chunk found at start is verified against its
// name the first time it is read, so a torn write is refetched rather than served. When the
// cache passes `high` bytes, the least recently used chunks are removed until it is at `low`.
//
// Writes are behind: an inserted chunk is served from memory until a writer thread has put it
// on disk, so a chunk lands for its readers at the speed it arrives. Creating a file costs
// ~0.7-1.8 ms of system time on this VM's ext4 (a directory and a file per chunk), and a prefetch
// pack of 129 chunks spent 230 of its 284 ms in those creates while a cold `print(1)` waited on
// it (bench/RESULTS.md). Bytes waiting in memory count in the counters and against the
// watermarks; past `kMaxPendingBytes` (or a quarter of `high`) waiting, the inserting thread
// writes itself. A
// chunk that cannot be written (the disk is full) is dropped and counted: its next read
// fetches it again. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
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
  ~ChunkCache();  // writes what is still waiting
  ChunkCache(const ChunkCache&) = delete;
  ChunkCache& operator=(const ChunkCache&) = delete;

  static constexpr uint64_t kMaxPendingBytes = 256ull << 20;

  // Indexes the chunks already on disk (oldest mtime first in LRU order).
  Status Load();
  // Reads `n` bytes at `off` of chunk `hex` (whose full length is `length`) into `out`.
  // False when the chunk is not cached (or was found corrupt and removed).
  bool Read(const std::string& hex, uint64_t length, uint64_t off, size_t n, char* out);
  // Adds a verified chunk (written behind; see above). Above the high watermark, the cache
  // evicts chunks on disk until it holds the low one.
  void Insert(const std::string& hex, std::shared_ptr<const std::string> bytes) EXCLUDES(mu_);
  void Insert(const std::string& hex, std::string_view bytes) EXCLUDES(mu_);
  // Cached, on disk or waiting to be written.
  bool Has(const std::string& hex);
  // Returns once every chunk inserted before is on disk (or failed to be).
  void Flush() EXCLUDES(mu_);
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
  // Writes the chunk's file and indexes it; `pending`: it was waiting in `pending_`.
  void Write(const std::string& hex, const std::string& bytes, bool pending) EXCLUDES(mu_);
  void WriterLoop() EXCLUDES(mu_);

  const std::string root_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
  std::list<std::string> lru_ GUARDED_BY(mu_);  // front: least recently used
  CacheCounters counters_ GUARDED_BY(mu_);
  // Inserted, not yet on disk: served from here. `queue_` is their order of arrival.
  std::unordered_map<std::string, std::shared_ptr<const std::string>> pending_ GUARDED_BY(mu_);
  std::deque<std::string> queue_ GUARDED_BY(mu_);
  uint64_t pending_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t pending_limit_ = kMaxPendingBytes;  // set once, in the constructor
  bool stop_ GUARDED_BY(mu_) = false;
  std::condition_variable_any cv_;
  std::thread writer_;  // last: starts once the rest is built
};

}  // namespace warren::blobfs
