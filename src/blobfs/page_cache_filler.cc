#include "blobfs/page_cache_filler.h"

#include <spdlog/spdlog.h>

#include <cstring>

namespace warren::blobfs {

PageCacheFiller::PageCacheFiller(BlobLayers* layers, StoreFn store)
    : layers_(layers), store_(std::move(store)) {}

PageCacheFiller::~PageCacheFiller() {
  Stop(std::chrono::milliseconds(0));
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void PageCacheFiller::Start(uint64_t ino, std::shared_ptr<BlobLayers::Layer> layer) {
  MutexLock lock(&mu_);
  if (cancel_ || !started_.insert(ino).second) return;
  ++running_;
  threads_.emplace_back([this, ino, layer = std::move(layer)] {
    Fill(ino, layer);
    {
      MutexLock done(&mu_);
      --running_;
    }
    cv_.notify_all();
  });
}

bool PageCacheFiller::Stop(std::chrono::milliseconds patience) {
  cancel_ = true;
  MutexLock lock(&mu_);
  return lock.WaitFor(cv_, patience, [this]() NO_THREAD_SAFETY_ANALYSIS { return running_ == 0; });
}

void PageCacheFiller::Fill(uint64_t ino, const std::shared_ptr<BlobLayers::Layer>& layer) {
  layers_->ForEachTracedChunk(
      layer,
      [&](uint64_t offset, std::string_view bytes) {
        const int rc = store_(ino, offset, bytes);
        if (rc == 0) return true;
        // ENOENT: the kernel forgot the inode (nothing left to fill); ENOSYS: a kernel without
        // FUSE_NOTIFY_STORE. Either way the reads go to blobfsd, as without a fill.
        if (rc != -ENOENT)
          spdlog::warn("blobfsd: fill the page cache of inode {} at {}: {}", ino, offset,
                       strerror(-rc));
        return false;
      },
      cancel_);
}

}  // namespace warren::blobfs
