// BlobLayers: the chunked layers blobfsd serves, each as one read-only blob file, and the
// chunk fetching behind their reads.
//
// A read maps its range to the layer's chunks (binary search in the manifest) and takes each
// from the node's cache, or fetches it from the shared store: once, however many readers (of
// however many layers sharing the chunk) wait for it, verified against its sha256 before it
// is cached or served. A chunk that cannot be fetched or does not verify fails the read
// (EIO for the reader): never zeros. Gaps between chunks (none in what mkfs.erofs writes) read
// as zeros, like the blob file they stand for.
//
// Prefetch: the first time a layer is opened on a node without a trace, the order in which its
// chunks are first touched during `trace_window_s` is recorded and saved beside the layer
// (STORE/traces/<hex>, and the shared store when this node can write it), not in it; with it,
// in the shared store, a prefetch pack: those chunks' bytes in trace order as one object
// (blobfs/prefetch_pack.h). When a layer with a trace is opened on a node missing most of its
// traced chunks, the pack is fetched in one stream, each chunk verified as it arrives and
// handed at once to any reader waiting for it; what the pack lacks (none published, a chunk
// evicted when it was made, a bad record) is fetched chunk by chunk in trace order by the
// `prefetch_threads` workers. Demand misses never queue behind those: a reader fetches its
// own chunk at once (or joins the fetch of it already running, the pack's included).
//
// Demand comes first, and in parallel: a read spanning several missing chunks hands all but
// the first to the workers ahead of any prefetch and fetches the first itself, so a 128 KiB
// kernel read over small chunks costs one store round trip, not one per chunk. A layer read
// sequentially for `sequential_bytes` (reads each starting where the last ended) has the
// chunks after it fetched ahead too, in a window as large as the run read so far, up to
// `readahead_max` bytes: a reader streaming a large file is not one round trip per chunk.
// blobfsd does not know where a file ends, so a stream's end over-fetches up to that window:
// it is kept small (1 MiB: 16 chunks in flight, ~200 MB/s at 5 ms a fetch). The run is counted
// in bytes, not reads: a mount reading ahead 16 KiB makes three reads in a row of one 48 KiB
// file, and counting reads fetched 26 chunks ahead on a cold `python3 -c 'print(1)'`, none of
// them read (1.1 MB, 12% of what it fetched).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "blobfs/blobfs_stats.h"
#include "blobfs/chunk_cache.h"
#include "image/blob_source.h"
#include "image/chunked_layer.h"
#include "image/layer_store.h"

namespace warren::blobfs {

struct BlobLayersOptions {
  int prefetch_threads = 8;
  double trace_window_s = 20;
  uint64_t sequential_bytes = 256 << 10;
  uint64_t readahead_max = 1 << 20;
  uint64_t pack_max_bytes = 64 << 20;  // a prefetch pack holds the trace's chunks up to this
};

class BlobLayers {
 public:
  struct Layer;

  // `publish`: where traces and packs go when not `source` (which may be a read-only URL).
  BlobLayers(image::LayerStore* store, image::BlobSource* source, ChunkCache* cache,
             BlobLayersOptions opts, image::BlobSource* publish = nullptr);
  ~BlobLayers();
  BlobLayers(const BlobLayers&) = delete;
  BlobLayers& operator=(const BlobLayers&) = delete;

  // The layer whose digest is sha256:<hex>, from its manifest in the node's store (the node
  // ensures it before mounting). Loaded once; a layer with a trace starts prefetching.
  Result<std::shared_ptr<Layer>> Open(const std::string& hex);
  uint64_t Size(const Layer& layer) const;
  // Reads up to `n` bytes at `off` (short at the blob's end) into `out`.
  Status Read(const std::shared_ptr<Layer>& layer, uint64_t off, size_t n, std::string* out);
  // Every opened layer's digest hex, in the order they were opened.
  std::vector<std::string> Opened();
  BlobfsStats Stats();
  // Saves the traces still being recorded (on shutdown).
  void FlushTraces();
  // Hands `fn` each traced chunk of `layer` (within the pack's bound) once it is in the node's
  // cache, as (blob offset, bytes), soonest first: blobfsd puts them in the kernel's page cache
  // before the sandbox reads them (blobfs/page_cache_filler.h). `fn` returns whether it took
  // the chunk (counted as `page_cached`). Fetches nothing itself: it waits for the pack and the
  // prefetch workers, and returns once every traced chunk was handed on or will not come (its
  // fetch failed, it was evicted), or at `cancel` (looked at every 100 ms at least).
  void ForEachTracedChunk(const std::shared_ptr<Layer>& layer,
                          const std::function<bool(uint64_t, std::string_view)>& fn,
                          const std::atomic<bool>& cancel) EXCLUDES(mu_);

 private:
  struct Flight;
  // The chunk's bytes, fetched by this caller or by the fetch already running. A worker
  // (`worker`) never waits for another's fetch: it gets null bytes (the chunk is on its way),
  // so no worker blocks on a pack only a worker can stream.
  Result<std::shared_ptr<const std::string>> Fetch(Layer& layer, size_t index, bool prefetch,
                                                   bool worker = false);
  void NoteTouch(const std::shared_ptr<Layer>& layer, size_t index);
  // Saves the layer's trace on the node and, with its pack, in the shared store.
  void SaveTrace(Layer& layer) EXCLUDES(mu_);
  // SaveTrace on a worker (inline without workers).
  void QueueSaveTrace(const std::shared_ptr<Layer>& layer) EXCLUDES(mu_);
  // The pack of `trace`'s chunks that are in the node's cache, in trace order.
  std::string BuildPack(const Layer& layer, const std::vector<uint32_t>& trace);
  // A chunk the pack is awaited for: its index and the flight Open registered for it.
  struct Awaited {
    uint32_t index;
    std::shared_ptr<Flight> flight;
  };
  // Streams the layer's pack into the cache, completing the flights Open registered for
  // `awaited` (distinct chunks, in trace order); what it did not bring is queued for prefetch.
  void StreamPack(const std::shared_ptr<Layer>& layer, const std::vector<Awaited>& awaited)
      EXCLUDES(mu_);
  // Ends `flight` (chunk `hex`'s): its waiters get `bytes`, or with `retry`, fetch it
  // themselves. The map entry goes only if it is still this flight.
  void Land(const std::string& hex, const std::shared_ptr<Flight>& flight,
            std::shared_ptr<const std::string> bytes, bool retry) EXCLUDES(mu_);
  void PrefetchLoop();
  // Queues chunks [first, last) of `layer` that are neither cached nor on their way, ahead of
  // traced prefetch.
  // `ahead`: fetched ahead of any read (counted as prefetch), not for a read waiting on it.
  void QueueUrgent(const std::shared_ptr<Layer>& layer, size_t first, size_t last, bool ahead);
  // The chunks after a sequential read to fetch ahead: [first, last), empty when none.
  std::pair<size_t, size_t> ReadaheadFor(Layer& layer, uint64_t off, uint64_t end);

  image::LayerStore* const store_;
  image::BlobSource* const source_;
  image::BlobSource* const publish_;
  ChunkCache* const cache_;
  const BlobLayersOptions opts_;

  Mutex mu_;
  // Two, so a chunk landing wakes those waiting for chunks, not every idle worker: a pack
  // lands a chunk every ~0.5 ms, and eight workers woken for each cost it a third of its time.
  std::condition_variable_any landed_cv_;  // a flight ended; traced fetches ended
  std::condition_variable_any work_cv_;    // a queue below has work; stop
  std::map<std::string, std::shared_ptr<Layer>> layers_ GUARDED_BY(mu_);
  std::vector<std::string> order_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Flight>> flights_ GUARDED_BY(mu_);  // by chunk hex
  // Fetches for the workers: urgent (a read's further chunks, readahead) before traced.
  struct Queued {
    std::shared_ptr<Layer> layer;
    size_t index;
    bool ahead;
  };
  std::deque<Queued> urgent_ GUARDED_BY(mu_);
  // Work for the workers ahead of urgent fetches: streaming a pack (readers wait on it),
  // saving a trace.
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  std::deque<Queued> prefetch_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace warren::blobfs
