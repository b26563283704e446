// LazyLayers: a node's block daemon for chunked layers (`warren blobfsd`, blobfs/), started,
// watched and restarted by the node that uses it.
//
// The daemon runs in a session of its own, so a `kill -9` of the node leaves it serving the
// sandboxes that survive too; the restarted node adopts it (pid file, its mount answering).
// Every half second the watcher checks the daemon's pidfd and reads its `.stats`:
//   - the daemon died: every read of its mount now fails with EIO (the kernel's doing), so
//     the sandboxes using any chunked layer are failed with the reason; the dead mount is
//     detached and a new daemon started (with backoff if it keeps dying);
//   - a layer's read errors grew (a chunk missing, unreachable or corrupt in the store): the
//     sandboxes using that layer are failed with the daemon's message.
// Never a silent zero-filled read, never a sandbox left hanging on a dead mount.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "blobfs/blobfs_stats.h"

namespace warren::node {

// The readahead of a layer mounted on blobfsd's file, where each page read ahead can be a
// chunk fetched. Measured (bench/lazy_layers.py, 402 MiB image): a cold `python3 -c
// 'print(1)'` fetched 9.1 MiB at the kernel's 128 KiB, 8.6 at 64, 7.8 at 16 (2.0% of the
// image: the target). The price is round trips: with no trace to prefetch and a 5 ms
// store it took 0.81 s at 16 against 0.66 s at 128; with the trace, 0.20-0.23 s either way.
// At 4 KiB warm runs went from 0.06 s to 0.11 s (a FUSE round trip per page).
constexpr uint32_t kLazyReadaheadKb = 16;

struct LazyLayersOptions {
  std::string store_root;    // the node's layer store (the daemon's chunk cache lives there)
  std::string source;        // the shared store, as `--layer-store` gives it
  std::string publish;       // its directory, when `source` is a URL over it (blobfsd --publish)
  std::string run_dir;       // mount point, pid file and log: DATA_DIR/blobfs
  uint64_t cache_bytes = 0;  // 0: unbounded
  uint32_t readahead_kb = kLazyReadaheadKb;  // of each layer mounted on the daemon's file
  bool fill_page_cache = true;               // blobfsd puts traced chunks in the page cache
};

class LazyLayers {
 public:
  // `layer`: the digest whose reads fail, or "" when all chunked layers' reads do.
  using FailFn = std::function<void(const std::string& layer, const std::string& reason)>;
  // Asked every 30 s for each layer the daemon has opened: make it a plain local file if
  // every chunk of it is cached (LayerStore::Promote), so later mounts skip the daemon.
  using PromoteFn = std::function<void(const std::string& layer)>;

  static Result<std::unique_ptr<LazyLayers>> Start(const LazyLayersOptions& opts, FailFn fail,
                                                   PromoteFn promote = nullptr);
  ~LazyLayers();
  LazyLayers(const LazyLayers&) = delete;
  LazyLayers& operator=(const LazyLayers&) = delete;

  // The blob file EROFS mounts for chunked layer `digest`. While the daemon is down (between
  // a death and its restart) it waits up to kRestartWait for it, then gives kUnavailable.
  Result<std::string> DevicePath(const std::string& digest);
  static constexpr std::chrono::seconds kRestartWait{5};
  // The daemon's last report (at most half a second old); empty before the first.
  // Has the daemon open chunked layer `digest` now, in the background (a lookup of its file):
  // it decodes the layer's manifest and starts the traced chunks' prefetch while the node
  // fetches the layer's metadata, instead of after, at the mount. The manifest must be here.
  void OpenAhead(const std::string& digest) EXCLUDES(mu_);
  blobfs::BlobfsStats Stats();
  uint64_t restarts() const { return restarts_.load(); }
  pid_t pid();
  // Stops the daemon and removes its mount (the node's orderly shutdown, after its
  // sandboxes are gone).
  void Shutdown();

 private:
  LazyLayers(LazyLayersOptions opts, FailFn fail, PromoteFn promote);
  void PromoteLoop();
  std::string Mountpoint() const { return opts_.run_dir + "/mnt"; }
  std::string PidFile() const { return opts_.run_dir + "/pid"; }
  // A daemon left by an earlier node process, if it is alive and its mount answers.
  bool Adopt();
  Status Spawn();
  // Waits (up to 10 s) until the daemon `pid` has mounted.
  Status WaitMounted(pid_t pid);
  Result<blobfs::BlobfsStats> ReadStats();
  void Watch();
  void DetachMount();
  void OpenLoop();
  // Stops the watcher and the promoter, and with `opener` the thread of OpenAhead.
  void StopThreads(bool opener) EXCLUDES(mu_);
  // Aborts the daemon's FUSE connection (umount -f): its pending requests fail.
  void AbortConnection();

  const LazyLayersOptions opts_;
  const FailFn fail_;
  const PromoteFn promote_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool up_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  pid_t pid_ GUARDED_BY(mu_) = -1;
  bool child_ GUARDED_BY(mu_) = false;  // ours to reap (not adopted)
  UniqueFd pidfd_ GUARDED_BY(mu_);
  blobfs::BlobfsStats stats_ GUARDED_BY(mu_);
  std::map<std::string, uint64_t> errors_seen_ GUARDED_BY(mu_);
  std::deque<std::string> to_open_ GUARDED_BY(mu_);  // OpenAhead's, by digest hex
  std::atomic<uint64_t> restarts_{0};
  std::thread watcher_;
  std::thread promoter_;
  std::thread opener_;
};

}  // namespace warren::node
