// What blobfsd reports (its `.stats` file, read by the node that runs it): per layer and for
// the node's chunk cache. The node renders it in /metrics and `warren image inspect`, and
// fails the sandboxes of a layer whose `errors` grows.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace warren::blobfs {

struct LayerFetchStats {
  std::string layer;           // the layer's digest
  uint64_t blob_bytes = 0;     // the layer's data (its chunks)
  uint64_t read_bytes = 0;     // served to readers
  uint64_t fetched_bytes = 0;  // fetched from the store (demand and prefetch)
  uint64_t fetches = 0;        // chunks fetched
  uint64_t hits = 0;           // chunk reads served from the node's cache
  uint64_t misses = 0;         // chunk reads that waited for a fetch
  uint64_t prefetched = 0;     // chunks fetched ahead of demand from the layer's trace
  uint64_t prefetch_hits = 0;  // chunk reads served by a chunk prefetch brought
  uint64_t packed = 0;         // of the prefetched, chunks that came in the layer's pack
  // Traced chunks put in the kernel's page cache before they were read: the sandbox reads
  // them without a request to blobfsd (so they count as neither hits nor prefetch hits).
  uint64_t page_cached = 0;
  double fetch_seconds_sum = 0;
  double fetch_seconds_max = 0;
  uint64_t errors = 0;  // reads failed (EIO): a chunk missing, unreachable or corrupt
  std::string last_error;
  bool traced = false;  // a prefetch trace exists for the layer
};

struct BlobfsStats {
  int64_t pid = 0;
  uint64_t cache_bytes = 0;
  uint64_t cache_chunks = 0;
  uint64_t cache_high = 0;
  uint64_t cache_low = 0;
  uint64_t cache_evictions = 0;
  uint64_t cache_write_errors = 0;
  uint64_t cache_corrupt = 0;
  std::vector<LayerFetchStats> layers;
};

std::string EncodeStats(const BlobfsStats& s);
// One layer's counters as JSON (the `.stats` file's and the node's Info use the same fields).
nlohmann::json LayerStatsJson(const LayerFetchStats& l);
Result<BlobfsStats> DecodeStats(std::string_view text);

}  // namespace warren::blobfs
