// PageCacheFiller: puts a traced layer's chunks in the kernel's page cache of its blob file as
// they reach the node (FUSE_NOTIFY_STORE), so a sandbox's first reads of them at a fresh mount
// make no request to blobfsd. On a cold start with the pack (every traced chunk already on its
// way) the sandbox's first command still made ~425 FUSE reads, and ran 50-75 ms slower than on
// a warm mount for them (bench/RESULTS.md, session 27).
//
// A store locks each page it fills, so it waits for any kernel read holding one of them until
// blobfsd answers that read. Hence stores run on their own threads (one per layer being
// filled), never on a thread that fetches chunks: a read spanning two chunks holds pages of the
// first while it waits for the second, which that thread would be the one to bring. And a fill
// must end before blobfsd stops answering reads (RunBlobfsd serves the kernel until Stop is
// done): a store waiting on a read nobody answers never returns, and cannot be killed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "blobfs/blob_layers.h"

namespace warren::blobfs {

class PageCacheFiller {
 public:
  // Stores `bytes` at `offset` in inode `ino`'s page cache: 0 or -errno.
  using StoreFn = std::function<int(uint64_t ino, uint64_t offset, std::string_view bytes)>;

  PageCacheFiller(BlobLayers* layers, StoreFn store);
  ~PageCacheFiller();  // cancels and joins the fills
  PageCacheFiller(const PageCacheFiller&) = delete;
  PageCacheFiller& operator=(const PageCacheFiller&) = delete;

  // Fills inode `ino` from `layer`'s traced chunks as they arrive, once per inode.
  void Start(uint64_t ino, std::shared_ptr<BlobLayers::Layer> layer) EXCLUDES(mu_);
  // Asks every fill to end (and no new one to start); true once none runs, within `patience`.
  bool Stop(std::chrono::milliseconds patience) EXCLUDES(mu_);

 private:
  void Fill(uint64_t ino, const std::shared_ptr<BlobLayers::Layer>& layer) EXCLUDES(mu_);

  BlobLayers* const layers_;
  const StoreFn store_;
  std::atomic<bool> cancel_{false};
  Mutex mu_;
  std::condition_variable_any cv_;
  std::set<uint64_t> started_ GUARDED_BY(mu_);
  int running_ GUARDED_BY(mu_) = 0;
  // The fills' threads; `ended_`: those that have returned, joined at the next Start.
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
  std::vector<std::thread::id> ended_ GUARDED_BY(mu_);
};

}  // namespace warren::blobfs
