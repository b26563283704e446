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
  std::vector<std::thread> finished;
  {
    MutexLock lock(&mu_);
    // A daemon opens layers for as long as it runs: the threads of fills that ended go now.
    for (const auto& id : ended_)
      for (auto it = threads_.begin(); it != threads_.end(); ++it)
        if (it->get_id() == id) {
          finished.push_back(std::move(*it));
          threads_.erase(it);
          break;
        }
    ended_.clear();
    if (!cancel_ && started_.insert(ino).second) {
      ++running_;
      threads_.emplace_back([this, ino, layer = std::move(layer)] {
        Fill(ino, layer);
        {
          MutexLock done(&mu_);
          --running_;
          ended_.push_back(std::this_thread::get_id());
        }
        cv_.notify_all();
      });
    }
  }
  for (auto& t : finished) t.join();  // each has returned, or is about to
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
