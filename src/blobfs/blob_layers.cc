#include "blobfs/blob_layers.h"

#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/sha256.h"
#include "blobfs/prefetch_pack.h"

namespace warren::blobfs {
namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// A trace is the chunk indexes a layer's first reads touched, in order: a JSON array.
std::string EncodeTrace(const std::vector<uint32_t>& order) { return nlohmann::json(order).dump(); }

std::vector<uint32_t> DecodeTrace(const std::string& text, size_t chunks) {
  std::vector<uint32_t> out;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return out;
  std::vector<bool> seen(chunks);
  for (const auto& v : j)
    if (v.is_number_unsigned() && v.get<uint64_t>() < chunks && !seen[v.get<uint64_t>()]) {
      seen[v.get<uint64_t>()] = true;
      out.push_back(v.get<uint32_t>());
    }
  return out;
}

}  // namespace

struct BlobLayers::Layer {
  std::string hex;
  image::ChunkedLayer manifest;
  std::vector<uint32_t> loaded_trace;  // the trace found at Open (set before it is shared)
  // Traced fetches not yet over (under BlobLayers::mu_): entries in `prefetch_` and those a
  // worker took, plus one while the pack streams. ForEachTracedChunk waits while any remain.
  int traced_open = 0;
  Mutex mu;
  LayerFetchStats stats GUARDED_BY(mu);
  std::vector<bool> prefetched GUARDED_BY(mu);  // brought by prefetch, not yet read
  // Recording a trace: the first touch of each chunk, until `trace_until` (monotonic s).
  bool recording GUARDED_BY(mu) = false;
  double trace_until GUARDED_BY(mu) = 0;
  std::vector<bool> touched GUARDED_BY(mu);
  std::vector<uint32_t> trace GUARDED_BY(mu);
  // Sequential reading: where the last read ended, the bytes read in a row up to there, and
  // the blob offset up to which chunks were already queued ahead.
  uint64_t last_end GUARDED_BY(mu) = 0;
  uint64_t run_bytes GUARDED_BY(mu) = 0;
  uint64_t ahead_until GUARDED_BY(mu) = 0;
};

struct BlobLayers::Flight {
  bool done = false;
  bool retry = false;  // ended without the chunk (a pack that lacked it): fetch it afresh
  Status status;
  std::shared_ptr<const std::string> bytes;
};

BlobLayers::BlobLayers(image::LayerStore* store, image::BlobSource* source, ChunkCache* cache,
                       BlobLayersOptions opts, image::BlobSource* publish)
    : store_(store),
      source_(source),
      publish_(publish ? publish : source),
      cache_(cache),
      opts_(opts) {
  for (int i = 0; i < opts_.prefetch_threads; ++i)
    workers_.emplace_back([this] { PrefetchLoop(); });
}

BlobLayers::~BlobLayers() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  landed_cv_.notify_all();
  // A pack job not run leaves its flights registered; nobody waits on them by now (the FUSE
  // threads have ended, and workers never wait on a flight).
  for (auto& t : workers_) t.join();
}

Result<std::shared_ptr<BlobLayers::Layer>> BlobLayers::Open(const std::string& hex) {
  {
    MutexLock lock(&mu_);
    if (auto it = layers_.find(hex); it != layers_.end()) return it->second;
  }
  image::ChunkedLayer m = *WARREN_TRY(store_->Manifest("sha256:" + hex));
  auto layer = std::make_shared<Layer>();
  layer->hex = hex;
  std::vector<uint32_t> trace;
  {
    std::string text;
    FILE* f = fopen(store_->TracePath(hex).c_str(), "re");
    if (f) {
      char buf[65536];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
      fclose(f);
    } else if (source_) {
      auto remote = source_->ReadObject(image::ObjectKind::kTrace, hex, 64ull << 20);
      if (remote.ok()) {
        text = std::move(*remote);
        (void)store_->PutObject(image::ObjectKind::kTrace, hex, text);
      }
    }
    if (!text.empty()) trace = DecodeTrace(text, m.chunks.size());
  }
  {
    MutexLock lock(&layer->mu);
    layer->stats.layer = "sha256:" + hex;
    layer->stats.blob_bytes = m.ChunkBytes();
    layer->stats.traced = !trace.empty();
    layer->prefetched.assign(m.chunks.size(), false);
    layer->touched.assign(m.chunks.size(), false);
    layer->recording = trace.empty();
  }
  layer->manifest = std::move(m);
  layer->loaded_trace = trace;
  MutexLock lock(&mu_);
  if (auto it = layers_.find(hex); it != layers_.end()) return it->second;  // lost a race
  layers_[hex] = layer;
  order_.push_back(hex);
  if (trace.empty()) return layer;
  // The pack when the node lacks most of what it holds (a cold node); else chunk by chunk.
  // Awaited from it: each missing chunk once (a layer may hold one content twice), within the
  // bytes a pack holds.
  uint64_t traced_bytes = 0, missing_bytes = 0, packed_bytes = kPackMagic.size();
  std::vector<uint32_t> awaited;
  std::set<std::string> seen;
  for (uint32_t i : trace) {
    const image::LayerChunk& c = layer->manifest.chunks[i];
    traced_bytes += c.length;
    if (cache_->Has(c.sha256) || flights_.count(c.sha256) || !seen.insert(c.sha256).second)
      continue;
    missing_bytes += c.length;
    packed_bytes += kPackRecordHead + c.length;  // as BuildPack counts
    if (packed_bytes <= opts_.pack_max_bytes) awaited.push_back(i);
  }
  const bool pack = source_ && opts_.prefetch_threads > 0 && awaited.size() > 1 &&
                    missing_bytes * 2 >= traced_bytes;
  if (pack) {
    // Readers of these chunks wait for the pack (it streams them in the order they are read)
    // rather than fetching them a second time; the rest of the trace follows chunk by chunk.
    std::vector<Awaited> flights;
    for (uint32_t i : awaited) {
      auto flight = std::make_shared<Flight>();
      flights_[layer->manifest.chunks[i].sha256] = flight;
      flights.push_back({i, std::move(flight)});
    }
    jobs_.push_back([this, layer, flights] { StreamPack(layer, flights); });
    ++layer->traced_open;
    for (uint32_t i : trace)
      if (!flights_.count(layer->manifest.chunks[i].sha256)) {
        prefetch_.push_back({layer, i, true});
        ++layer->traced_open;
      }
  } else {
    for (uint32_t i : trace) prefetch_.push_back({layer, i, true});
    // Without workers nothing takes them: nothing is coming.
    if (opts_.prefetch_threads > 0) layer->traced_open += static_cast<int>(trace.size());
  }
  spdlog::info("blobfsd: layer sha256:{} opened; prefetching {} traced chunks{}", hex, trace.size(),
               pack ? ", as a pack" : "");
  work_cv_.notify_all();
  return layer;
}

uint64_t BlobLayers::Size(const Layer& layer) const { return layer.manifest.blob_size; }

std::vector<std::string> BlobLayers::Opened() {
  MutexLock lock(&mu_);
  return order_;
}

void BlobLayers::NoteTouch(const std::shared_ptr<Layer>& lp, size_t index) {
  Layer& layer = *lp;
  bool save = false;
  {
    MutexLock lock(&layer.mu);
    if (!layer.recording) return;
    const double now = Now();
    if (layer.trace_until == 0) layer.trace_until = now + opts_.trace_window_s;
    if (now > layer.trace_until) {
      layer.recording = false;
      save = true;
    } else if (!layer.touched[index]) {
      layer.touched[index] = true;
      layer.trace.push_back(static_cast<uint32_t>(index));
    }
  }
  if (save) QueueSaveTrace(lp);
}

void BlobLayers::QueueSaveTrace(const std::shared_ptr<Layer>& layer) {
  if (opts_.prefetch_threads == 0) return SaveTrace(*layer);
  // Not on a FUSE thread: the pack reads every traced chunk back from the cache.
  {
    MutexLock lock(&mu_);
    jobs_.push_back([this, layer] { SaveTrace(*layer); });
  }
  work_cv_.notify_all();
}

void BlobLayers::SaveTrace(Layer& layer) {
  std::string text;
  std::vector<uint32_t> trace;
  {
    MutexLock lock(&layer.mu);
    if (layer.trace.empty() || layer.stats.traced) return;
    layer.stats.traced = true;
    trace = layer.trace;
    text = EncodeTrace(trace);
  }
  Status st = store_->PutObject(image::ObjectKind::kTrace, layer.hex, text);
  if (!st.ok()) return void(spdlog::warn("blobfsd: save trace: {}", st.ToString()));
  if (!publish_) return;
  // The pack before the trace: a node that finds the trace finds its pack.
  Status pub =
      publish_->PublishBeside(image::ObjectKind::kPack, layer.hex, BuildPack(layer, trace));
  if (pub.ok()) pub = publish_->PublishBeside(image::ObjectKind::kTrace, layer.hex, text);
  if (!pub.ok())
    spdlog::info("blobfsd: trace of {} kept on this node: {}", layer.hex, pub.ToString());
}

std::string BlobLayers::BuildPack(const Layer& layer, const std::vector<uint32_t>& trace) {
  std::string pack = PackStart();
  std::string bytes;
  for (uint32_t i : trace) {
    const image::LayerChunk& c = layer.manifest.chunks[i];
    if (pack.size() + kPackRecordHead + c.length > opts_.pack_max_bytes) break;
    bytes.resize(c.length);
    // Evicted since it was read: the pack goes without it (a node fetches it alone).
    if (!cache_->Read(c.sha256, c.length, 0, c.length, bytes.data())) continue;
    AppendPackRecord(&pack, c.sha256, bytes);
  }
  return pack;
}

void BlobLayers::StreamPack(const std::shared_ptr<Layer>& layer,
                            const std::vector<Awaited>& awaited) {
  const image::ChunkedLayer& m = layer->manifest;
  std::map<std::string, size_t> position;  // by chunk hex: where in `awaited`
  for (size_t p = 0; p < awaited.size(); ++p) position[m.chunks[awaited[p].index].sha256] = p;
  std::vector<bool> ended(awaited.size());
  size_t next = 0;  // awaited[..next) are ended
  // What the pack does not bring: its waiters fetch it themselves, the workers in trace order.
  auto give_up = [&](size_t p) {
    ended[p] = true;
    const uint32_t index = awaited[p].index;
    {
      // Counted before the flight ends, so ForEachTracedChunk never sees it neither on its
      // way nor queued; queued after, or a worker would take the flight for the fetch itself.
      MutexLock lock(&mu_);
      ++layer->traced_open;
    }
    Land(m.chunks[index].sha256, awaited[p].flight, nullptr, true);
    {
      MutexLock lock(&mu_);
      prefetch_.push_back({layer, index, true});
    }
    work_cv_.notify_one();
  };
  const double t0 = Now();
  size_t landed = 0;
  PackReader reader(m.chunk_size, [&](const std::string& hex, std::string_view bytes) {
    auto it = position.find(hex);
    if (it == position.end() || ended[it->second]) return true;  // not awaited here
    const size_t p = it->second;
    const uint32_t index = awaited[p].index;
    if (bytes.size() != m.chunks[index].length || Sha256Hex(bytes) != hex) {
      spdlog::warn(
          "blobfsd: the prefetch pack of sha256:{} has a corrupt chunk {}; the rest of "
          "its chunks are fetched one by one",
          layer->hex, hex);
      return false;
    }
    // The pack is in trace order: awaited chunks before this one that it skipped are not in it
    // (evicted when it was made), so their readers stop waiting for it now.
    for (; next < p; ++next)
      if (!ended[next]) give_up(next);
    auto shared = std::make_shared<const std::string>(bytes);
    {
      MutexLock lock(&layer->mu);  // cached and counted as one step (see Fetch)
      cache_->Insert(hex, shared);
      ++layer->stats.fetches;
      ++layer->stats.prefetched;
      ++layer->stats.packed;
      layer->stats.fetched_bytes += bytes.size();
      layer->prefetched[index] = true;
    }
    ended[p] = true;
    ++landed;
    Land(hex, awaited[p].flight, std::move(shared), false);
    return true;
  });
  Status st = source_->StreamObject(image::ObjectKind::kPack, layer->hex, opts_.pack_max_bytes,
                                    [&](std::string_view piece) {
                                      {
                                        MutexLock lock(&mu_);
                                        if (stop_) return false;
                                      }
                                      return reader.Feed(piece);
                                    });
  if (!st.ok() && st.code() != Code::kNotFound)
    spdlog::warn("blobfsd: prefetch pack of sha256:{}: {}", layer->hex, st.ToString());
  if (!reader.error().empty())
    spdlog::warn("blobfsd: prefetch pack of sha256:{}: {}", layer->hex, reader.error());
  if (landed > 0) {
    MutexLock lock(&layer->mu);
    layer->stats.fetch_seconds_sum += Now() - t0;  // one fetch's time for the whole pack
    layer->stats.fetch_seconds_max = std::max(layer->stats.fetch_seconds_max, Now() - t0);
  }
  for (size_t p = 0; p < awaited.size(); ++p)
    if (!ended[p]) give_up(p);
  {
    MutexLock lock(&mu_);
    --layer->traced_open;
  }
  work_cv_.notify_all();  // what the pack lacked is queued
  landed_cv_.notify_all();
}

void BlobLayers::Land(const std::string& hex, const std::shared_ptr<Flight>& flight,
                      std::shared_ptr<const std::string> bytes, bool retry) {
  {
    MutexLock lock(&mu_);
    flight->done = true;
    flight->retry = retry;
    flight->bytes = std::move(bytes);
    if (auto it = flights_.find(hex); it != flights_.end() && it->second == flight)
      flights_.erase(it);
  }
  landed_cv_.notify_all();
}

void BlobLayers::FlushTraces() {
  std::vector<std::shared_ptr<Layer>> all;
  {
    MutexLock lock(&mu_);
    for (auto& [h, l] : layers_) all.push_back(l);
  }
  for (auto& l : all) {
    {
      MutexLock lock(&l->mu);
      // Recording, or ended with its save still queued behind a worker's job.
      if (!l->recording && (l->stats.traced || l->trace.empty())) continue;
      l->recording = false;
    }
    SaveTrace(*l);
  }
}

Result<std::shared_ptr<const std::string>> BlobLayers::Fetch(Layer& layer, size_t index,
                                                             bool prefetch, bool worker) {
  const image::LayerChunk& c = layer.manifest.chunks[index];
  std::shared_ptr<Flight> flight;
  for (;;) {
    MutexLock lock(&mu_);
    auto it = flights_.find(c.sha256);
    if (it == flights_.end()) {
      flight = std::make_shared<Flight>();
      flights_[c.sha256] = flight;
      break;  // this caller fetches it
    }
    if (worker) return std::shared_ptr<const std::string>();  // on its way
    flight = it->second;
    while (!flight->done) lock.Wait(landed_cv_);
    if (flight->retry) continue;
    if (!flight->status.ok()) return flight->status;
    return flight->bytes;
  }
  // A fetch that finished between the caller's cache miss and this flight: no second fetch.
  {
    std::string cached(c.length, '\0');
    if (cache_->Read(c.sha256, c.length, 0, c.length, cached.data())) {
      auto bytes = std::make_shared<const std::string>(std::move(cached));
      {
        MutexLock lock(&mu_);
        flight->done = true;
        flight->bytes = bytes;
        flights_.erase(c.sha256);
      }
      landed_cv_.notify_all();
      return bytes;
    }
  }
  const double t0 = Now();
  Status st;
  std::shared_ptr<const std::string> bytes;
  auto got = source_ ? source_->ReadObject(image::ObjectKind::kChunk, c.sha256, c.length)
                     : Result<std::string>(NotFound("layer chunk (no store)", c.sha256));
  if (!got.ok()) {
    st = got.status();
  } else if (got->size() != c.length || Sha256Hex(*got) != c.sha256) {
    // The store is trusted to be reachable, not to be right.
    st = Status(Code::kInternal, "fetch layer chunk", c.sha256,
                "the store's copy does not match its digest (corrupt)");
  } else {
    bytes = std::make_shared<const std::string>(std::move(*got));
  }
  const double took = Now() - t0;
  {
    // Counted and cached as one step for whoever reads the stats (under this lock): a reader
    // served from the cache finds the fetch counted, and a count reached means cached.
    MutexLock lock(&layer.mu);
    if (bytes) {
      cache_->Insert(c.sha256, bytes);
      ++layer.stats.fetches;
      layer.stats.fetched_bytes += c.length;
      layer.stats.fetch_seconds_sum += took;
      layer.stats.fetch_seconds_max = std::max(layer.stats.fetch_seconds_max, took);
      if (prefetch) {
        ++layer.stats.prefetched;
        layer.prefetched[index] = true;
      }
    }
  }
  {
    MutexLock lock(&mu_);
    flight->done = true;
    flight->status = st;
    flight->bytes = bytes;
    flights_.erase(c.sha256);
  }
  landed_cv_.notify_all();
  if (!st.ok()) return st;
  return bytes;
}

std::pair<size_t, size_t> BlobLayers::ReadaheadFor(Layer& layer, uint64_t off, uint64_t end) {
  const image::ChunkedLayer& m = layer.manifest;
  uint64_t from, to;
  {
    MutexLock lock(&layer.mu);
    layer.run_bytes = (off == layer.last_end && off != 0 ? layer.run_bytes : 0) + (end - off);
    layer.last_end = end;
    if (opts_.readahead_max == 0) return {0, 0};
    if (layer.run_bytes < opts_.sequential_bytes) return {0, 0};
    // The window grows with the run: as much ahead as was read in a row.
    const uint64_t window = std::min<uint64_t>(opts_.readahead_max, layer.run_bytes);
    from = std::max(end, layer.ahead_until);
    to = std::min<uint64_t>(m.blob_size, end + window);
    if (from >= to) return {0, 0};
    layer.ahead_until = to;
  }
  return m.ChunksOverlapping(from, to);
}

void BlobLayers::QueueUrgent(const std::shared_ptr<Layer>& layer, size_t first, size_t last,
                             bool ahead) {
  if (first >= last || opts_.prefetch_threads == 0) return;
  {
    MutexLock lock(&mu_);
    for (size_t i = first; i < last; ++i)
      if (!flights_.count(layer->manifest.chunks[i].sha256)) urgent_.push_back({layer, i, ahead});
  }
  work_cv_.notify_all();
}

Status BlobLayers::Read(const std::shared_ptr<Layer>& lp, uint64_t off, size_t n,
                        std::string* out) {
  Layer& layer = *lp;
  const image::ChunkedLayer& m = layer.manifest;
  out->clear();
  if (off >= m.blob_size) return Status::Ok();
  const uint64_t end = std::min<uint64_t>(m.blob_size, off + n);
  out->assign(end - off, '\0');  // gaps read as zeros, as in the blob file
  const auto [first, last] = m.ChunksOverlapping(off, end);
  // Every chunk of the read that is missing is fetched at once: the first by this reader, the
  // rest by the workers (a chunk a worker has not started yet, this reader takes over below).
  std::vector<bool> missed(last - first);
  for (size_t i = first, queued = 0; i < last; ++i) {
    NoteTouch(lp, i);
    if (cache_->Has(m.chunks[i].sha256)) continue;
    missed[i - first] = true;
    if (queued++ > 0) QueueUrgent(lp, i, i + 1, false);
  }
  auto [ahead_first, ahead_last] = ReadaheadFor(layer, off, end);
  QueueUrgent(lp, ahead_first, ahead_last, true);
  for (size_t i = first; i < last; ++i) {
    const image::LayerChunk& c = m.chunks[i];
    const uint64_t from = std::max(off, c.offset), to = std::min(end, c.offset + c.length);
    char* dst = out->data() + (from - off);
    const bool miss = missed[i - first];
    if (cache_->Read(c.sha256, c.length, from - c.offset, to - from, dst)) {
      MutexLock lock(&layer.mu);
      if (miss) {
        ++layer.stats.misses;  // fetched by a worker for this read
        continue;
      }
      ++layer.stats.hits;
      if (layer.prefetched[i]) {
        ++layer.stats.prefetch_hits;
        layer.prefetched[i] = false;
      }
      continue;
    }
    auto bytes = Fetch(layer, i, false);
    MutexLock lock(&layer.mu);
    if (!bytes.ok()) {
      ++layer.stats.errors;
      layer.stats.last_error = bytes.status().ToString();
      spdlog::error("blobfsd: read of layer sha256:{} at {} failed: {}", layer.hex, from,
                    layer.stats.last_error);
      return bytes.status();
    }
    ++layer.stats.misses;
    memcpy(dst, (*bytes)->data() + (from - c.offset), to - from);
  }
  MutexLock lock(&layer.mu);
  layer.stats.read_bytes += end - off;
  return Status::Ok();
}

void BlobLayers::PrefetchLoop() {
  for (;;) {
    Queued q;
    std::function<void()> job;
    {
      MutexLock lock(&mu_);
      while (!stop_ && urgent_.empty() && jobs_.empty() && prefetch_.empty()) lock.Wait(work_cv_);
      if (stop_) return;
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
    }
    if (job) {
      job();
      continue;
    }
    bool traced;
    {
      MutexLock lock(&mu_);
      if (urgent_.empty() && prefetch_.empty()) continue;  // taken by another worker
      traced = urgent_.empty();
      auto& queue = traced ? prefetch_ : urgent_;
      q = std::move(queue.front());
      queue.pop_front();
    }
    std::shared_ptr<Layer> layer = std::move(q.layer);
    const size_t index = q.index;
    // A chunk on its way (another's flight) is left to it: Fetch returns at once for a worker.
    if (!cache_->Has(layer->manifest.chunks[index].sha256)) {
      auto r = Fetch(*layer, index, q.ahead, /*worker=*/true);
      if (!r.ok())
        spdlog::warn("blobfsd: prefetch of a chunk of sha256:{} failed: {}", layer->hex,
                     r.status().ToString());
    }
    if (!traced) continue;
    {
      MutexLock lock(&mu_);
      --layer->traced_open;
    }
    landed_cv_.notify_all();
  }
}

void BlobLayers::ForEachTracedChunk(const std::shared_ptr<Layer>& layer,
                                    const std::function<bool(uint64_t, std::string_view)>& fn,
                                    const std::atomic<bool>& cancel) {
  const image::ChunkedLayer& m = layer->manifest;
  std::vector<uint32_t> pending;  // the traced chunks within the pack's bound, in trace order
  uint64_t bytes = kPackMagic.size();
  for (uint32_t i : layer->loaded_trace) {  // distinct (DecodeTrace)
    bytes += kPackRecordHead + m.chunks[i].length;
    if (bytes > opts_.pack_max_bytes) break;
    pending.push_back(i);
  }
  std::string buf;
  while (!pending.empty() && !cancel) {
    std::vector<uint32_t> later;
    for (uint32_t i : pending) {
      const image::LayerChunk& c = m.chunks[i];
      buf.resize(c.length);
      if (cancel) return;
      if (!cache_->Read(c.sha256, c.length, 0, c.length, buf.data())) {
        // Not here yet; or indexed yet unreadable (its file removed behind the cache's back),
        // which waiting would not mend: its reader fetches it.
        if (!cache_->Has(c.sha256)) later.push_back(i);
        continue;
      }
      if (!fn(c.offset, buf)) return;
      MutexLock lock(&layer->mu);
      ++layer->stats.page_cached;
    }
    pending.swap(later);
    if (pending.empty()) return;
    MutexLock lock(&mu_);
    // Under mu_, so a chunk landing after this look also notifies after the wait begins.
    bool ready = false, coming = layer->traced_open > 0;
    for (uint32_t i : pending) {
      ready = ready || cache_->Has(m.chunks[i].sha256);
      coming = coming || flights_.count(m.chunks[i].sha256) > 0;
    }
    if (ready) continue;
    if (stop_ || !coming) return;  // the rest failed or was evicted: readers fetch it
    lock.WaitFor(landed_cv_, std::chrono::milliseconds(100));
  }
}

BlobfsStats BlobLayers::Stats() {
  BlobfsStats s;
  const CacheCounters c = cache_->Counters();
  s.pid = getpid();
  s.cache_bytes = c.bytes;
  s.cache_chunks = c.chunks;
  s.cache_high = c.high;
  s.cache_low = c.low;
  s.cache_evictions = c.evictions;
  s.cache_write_errors = c.write_errors;
  s.cache_corrupt = c.corrupt;
  std::vector<std::shared_ptr<Layer>> all;
  {
    MutexLock lock(&mu_);
    for (const auto& h : order_) all.push_back(layers_[h]);
  }
  const double now = Now();
  for (auto& l : all) {
    bool save = false;
    {
      MutexLock lock(&l->mu);
      // A recording whose window has passed ends here too (the node asks every second),
      // not only on the layer's next read.
      if (l->recording && l->trace_until != 0 && now > l->trace_until) {
        l->recording = false;
        save = true;
      }
    }
    if (save) QueueSaveTrace(l);
    MutexLock lock(&l->mu);
    s.layers.push_back(l->stats);
  }
  return s;
}

}  // namespace warren::blobfs
