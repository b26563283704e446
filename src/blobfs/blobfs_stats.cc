#include "blobfs/blobfs_stats.h"

#include <nlohmann/json.hpp>

#include "base/json_fields.h"

namespace warren::blobfs {

using nlohmann::json;

json LayerStatsJson(const LayerFetchStats& l) {
  return {{"layer", l.layer},
          {"blob_bytes", l.blob_bytes},
          {"read_bytes", l.read_bytes},
          {"fetched_bytes", l.fetched_bytes},
          {"fetches", l.fetches},
          {"hits", l.hits},
          {"misses", l.misses},
          {"prefetched", l.prefetched},
          {"prefetch_hits", l.prefetch_hits},
          {"packed", l.packed},
          {"page_cached", l.page_cached},
          {"fetch_seconds_sum", l.fetch_seconds_sum},
          {"fetch_seconds_max", l.fetch_seconds_max},
          {"errors", l.errors},
          {"last_error", l.last_error},
          {"traced", l.traced}};
}

std::string EncodeStats(const BlobfsStats& s) {
  json layers = json::array();
  for (const auto& l : s.layers) layers.push_back(LayerStatsJson(l));
  json j = {{"pid", s.pid},
            {"cache_bytes", s.cache_bytes},
            {"cache_chunks", s.cache_chunks},
            {"cache_high", s.cache_high},
            {"cache_low", s.cache_low},
            {"cache_evictions", s.cache_evictions},
            {"cache_write_errors", s.cache_write_errors},
            {"cache_corrupt", s.cache_corrupt},
            {"layers", std::move(layers)}};
  return j.dump() + "\n";
}

Result<BlobfsStats> DecodeStats(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return Invalid("blobfsd stats: not JSON");
  JsonFields f(j, "blobfsd stats");
  BlobfsStats s;
  const json* layers = nullptr;
  WARREN_RETURN_IF_ERROR(f.Object());
  WARREN_RETURN_IF_ERROR(f.Int("pid", &s.pid));
  WARREN_RETURN_IF_ERROR(f.UInt("cache_bytes", &s.cache_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("cache_chunks", &s.cache_chunks));
  WARREN_RETURN_IF_ERROR(f.UInt("cache_high", &s.cache_high));
  WARREN_RETURN_IF_ERROR(f.UInt("cache_low", &s.cache_low));
  WARREN_RETURN_IF_ERROR(f.UInt("cache_evictions", &s.cache_evictions));
  WARREN_RETURN_IF_ERROR(f.UInt("cache_write_errors", &s.cache_write_errors));
  WARREN_RETURN_IF_ERROR(f.UInt("cache_corrupt", &s.cache_corrupt));
  WARREN_RETURN_IF_ERROR(f.Value("layers", &layers));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  if (!layers->is_array()) return Invalid("blobfsd stats: layers is not an array");
  for (const json& lj : *layers) {
    JsonFields g(lj, "blobfsd layer stats");
    LayerFetchStats l;
    WARREN_RETURN_IF_ERROR(g.Object());
    WARREN_RETURN_IF_ERROR(g.String("layer", &l.layer));
    WARREN_RETURN_IF_ERROR(g.UInt("blob_bytes", &l.blob_bytes));
    WARREN_RETURN_IF_ERROR(g.UInt("read_bytes", &l.read_bytes));
    WARREN_RETURN_IF_ERROR(g.UInt("fetched_bytes", &l.fetched_bytes));
    WARREN_RETURN_IF_ERROR(g.UInt("fetches", &l.fetches));
    WARREN_RETURN_IF_ERROR(g.UInt("hits", &l.hits));
    WARREN_RETURN_IF_ERROR(g.UInt("misses", &l.misses));
    WARREN_RETURN_IF_ERROR(g.UInt("prefetched", &l.prefetched));
    WARREN_RETURN_IF_ERROR(g.UInt("prefetch_hits", &l.prefetch_hits));
    WARREN_RETURN_IF_ERROR(g.UInt("packed", &l.packed, false));  // an older blobfsd: none
    WARREN_RETURN_IF_ERROR(g.UInt("page_cached", &l.page_cached, false));
    WARREN_RETURN_IF_ERROR(g.Double("fetch_seconds_sum", &l.fetch_seconds_sum));
    WARREN_RETURN_IF_ERROR(g.Double("fetch_seconds_max", &l.fetch_seconds_max));
    WARREN_RETURN_IF_ERROR(g.UInt("errors", &l.errors));
    WARREN_RETURN_IF_ERROR(g.String("last_error", &l.last_error));
    WARREN_RETURN_IF_ERROR(g.Bool("traced", &l.traced, true));
    WARREN_RETURN_IF_ERROR(g.NoOthers());
    s.layers.push_back(std::move(l));
  }
  return s;
}

}  // namespace warren::blobfs
