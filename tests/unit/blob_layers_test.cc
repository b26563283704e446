// BlobLayers (blobfs/blob_layers.h) without FUSE: a read over several missing chunks fetches
// them in parallel, a sequential reader has the chunks after it fetched ahead (and no more
// than the window), a traced layer on a cold node comes in its prefetch pack (and what the
// pack lacks, chunk by chunk), what a read returns is the chunks' bytes, and the page cache
// filler is handed each traced chunk as it arrives. The store is a
// fake whose every fetch takes a while, so overlap is visible.
#include "blobfs/blob_layers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/sha256.h"
#include "blobfs/page_cache_filler.h"
#include "blobfs/prefetch_pack.h"
#include "test_files.h"

namespace warren::blobfs {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kChunk = 64 << 10;

class SlowSource : public image::BlobSource {
 public:
  std::map<std::string, std::string> chunks;  // by hex

  Status Fetch(const std::string& digest, const std::string&) override {
    return NotFound("blob", digest);
  }
  Status Publish(const std::string& digest, const std::string&) override {
    return Invalid("read-only", digest);
  }
  Result<std::string> ReadObject(image::ObjectKind kind, const std::string& hex,
                                 uint64_t) override {
    if (kind == image::ObjectKind::kTrace) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!traces_.count(hex)) return NotFound("trace", hex);
      return traces_[hex];
    }
    if (kind != image::ObjectKind::kChunk) return NotFound("object", hex);
    int now = ++inflight_;
    for (int seen = max_inflight_; now > seen && !max_inflight_.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    --inflight_;
    ++reads_;
    auto it = chunks.find(hex);
    if (it == chunks.end()) return NotFound("chunk", hex);
    return it->second;
  }
  // A pack streams in pieces of `pack_piece` bytes, `pack_delay` apart.
  Status StreamObject(image::ObjectKind kind, const std::string& hex, uint64_t max,
                      const std::function<bool(std::string_view)>& on_bytes) override {
    if (kind != image::ObjectKind::kPack) return BlobSource::StreamObject(kind, hex, max, on_bytes);
    ++pack_reads_;
    std::string pack;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!packs_.count(hex)) return NotFound("pack", hex);
      pack = packs_[hex];
    }
    for (size_t at = 0; at < pack.size(); at += pack_piece) {
      std::this_thread::sleep_for(pack_delay);
      if (!on_bytes(std::string_view(pack).substr(at, pack_piece))) break;
    }
    return Status::Ok();
  }
  Status PublishBeside(image::ObjectKind kind, const std::string& hex,
                       std::string_view bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    (kind == image::ObjectKind::kPack ? packs_ : traces_)[hex] = std::string(bytes);
    return Status::Ok();
  }
  std::string Describe() const override { return "slow fake"; }

  // What is published beside layer `hex` ("" when nothing is).
  std::string Pack(const std::string& hex) {
    std::lock_guard<std::mutex> lock(mu_);
    return packs_.count(hex) ? packs_[hex] : "";
  }
  std::string Trace(const std::string& hex) {
    std::lock_guard<std::mutex> lock(mu_);
    return traces_.count(hex) ? traces_[hex] : "";
  }

  int max_inflight() const { return max_inflight_; }
  int reads() const { return reads_; }
  int pack_reads() const { return pack_reads_; }
  size_t pack_piece = 1 << 20;
  std::chrono::milliseconds pack_delay{30};

 private:
  std::atomic<int> inflight_{0}, max_inflight_{0}, reads_{0}, pack_reads_{0};
  std::mutex mu_;
  std::map<std::string, std::string> packs_, traces_;  // by layer hex
};

class BlobLayersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("warren-blob-layers-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    store_ = std::make_unique<image::LayerStore>(dir_);
    ASSERT_TRUE(store_->Init().ok());
    // 64 distinct full chunks, back to back: the blob a file of 4 MiB would give.
    image::ChunkedLayer m;
    m.meta_sha256 = std::string(64, 'a');
    m.meta_size = 4096;
    m.chunk_size = kChunk;
    m.block_size = 4096;
    for (uint32_t i = 0; i < 64; ++i) {
      std::string bytes = testing::RandomBytes(kChunk, 1000 + i);
      const std::string hex = Sha256Hex(bytes);
      m.chunks.push_back({i * kChunk, kChunk, hex});
      hexes_.push_back(hex);
      blob_ += bytes;
      source_.chunks[hex] = std::move(bytes);
    }
    m.blob_size = blob_.size();
    const std::string manifest = image::EncodeManifest(m);
    hex_ = Sha256Hex(manifest);
    testing::WriteFile(store_->BlobPath("sha256:" + hex_), manifest);
    cache_ = std::make_unique<ChunkCache>(dir_, 0, 0);
    ASSERT_TRUE(cache_->Load().ok());
    layers_ =
        std::make_unique<BlobLayers>(store_.get(), &source_, cache_.get(), BlobLayersOptions{});
  }
  void TearDown() override {
    layers_.reset();
    cache_.reset();  // writes what it holds first: nothing is written into a removed tree
    fs::remove_all(dir_);
  }

  LayerFetchStats StatsOfLayer() { return layers_->Stats().layers.at(0); }
  std::string ChunkOf(uint32_t i) const { return blob_.substr(i * kChunk, kChunk); }

  // A trace on this node, as one the layer's first use on another node left.
  void PutTrace(const std::vector<uint32_t>& trace) {
    std::string text = "[";
    for (uint32_t i : trace) text += (text.size() > 1 ? "," : "") + std::to_string(i);
    ASSERT_TRUE(store_->PutObject(image::ObjectKind::kTrace, hex_, text + "]").ok());
  }
  // A pack of `chunks` in the store; the chunk `corrupt` (if one of them) with a byte changed.
  void PutPack(const std::vector<uint32_t>& chunks, int corrupt = -1) {
    std::string pack = PackStart();
    for (uint32_t i : chunks) {
      std::string bytes = ChunkOf(i);
      if (static_cast<int>(i) == corrupt) bytes[100] ^= 1;
      AppendPackRecord(&pack, hexes_[i], bytes);
    }
    ASSERT_TRUE(source_.PublishBeside(image::ObjectKind::kPack, hex_, pack).ok());
  }
  // Waits (5 s at most) until the layer's stats satisfy `pred`.
  template <typename P>
  bool StatsReach(P pred) {
    for (int i = 0; i < 500; ++i) {
      if (pred(StatsOfLayer())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::vector<std::string> hexes_;  // chunk i's digest
  std::string dir_, hex_, blob_;
  SlowSource source_;
  std::unique_ptr<image::LayerStore> store_;
  std::unique_ptr<ChunkCache> cache_;
  std::unique_ptr<BlobLayers> layers_;
};

TEST_F(BlobLayersTest, AReadOverSeveralMissingChunksFetchesThemTogether) {
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  std::string out;
  // 8 chunks from the middle of the second one: 9 chunks touched.
  const uint64_t off = kChunk + 100, n = 8 * kChunk;
  ASSERT_TRUE(layers_->Read(*layer, off, n, &out).ok());
  EXPECT_EQ(out, blob_.substr(off, n));
  EXPECT_EQ(source_.reads(), 9);
  EXPECT_GE(source_.max_inflight(), 2) << "the chunks of one read were fetched one by one";
  const LayerFetchStats s = StatsOfLayer();
  EXPECT_EQ(s.misses, 9u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.fetches, 9u);

  // Again: all from the cache.
  ASSERT_TRUE(layers_->Read(*layer, off, n, &out).ok());
  EXPECT_EQ(out, blob_.substr(off, n));
  EXPECT_EQ(source_.reads(), 9);
  EXPECT_EQ(StatsOfLayer().hits, 9u);
}

TEST_F(BlobLayersTest, ASequentialReaderHasTheNextChunksFetchedAheadWithinTheWindow) {
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  std::string out;
  for (uint64_t off = 0; off < 8 * kChunk; off += kChunk) {
    ASSERT_TRUE(layers_->Read(*layer, off, kChunk, &out).ok());
    EXPECT_EQ(out, blob_.substr(off, kChunk));
  }
  // Fetches ahead finish in the background: wait for the workers to go quiet.
  int last = -1;
  for (int i = 0; i < 100 && source_.reads() != last; ++i) {
    last = source_.reads();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const LayerFetchStats s = StatsOfLayer();
  EXPECT_GT(s.prefetched, 0u) << "nothing was fetched ahead of a sequential reader";
  // Never more than the window (1 MiB) past what was read.
  EXPECT_LE(s.fetched_bytes, 8 * kChunk + BlobLayersOptions{}.readahead_max);
  EXPECT_EQ(s.errors, 0u);
  // What was fetched ahead serves the next reads from the cache.
  const int before = source_.reads();
  ASSERT_TRUE(layers_->Read(*layer, 8 * kChunk, kChunk, &out).ok());
  EXPECT_EQ(out, blob_.substr(8 * kChunk, kChunk));
  EXPECT_GT(StatsOfLayer().prefetch_hits, 0u);
  EXPECT_EQ(source_.reads(), before);
}

// A mount reading ahead 16 KiB reads a small file in pieces, each where the last ended: that
// is not yet a stream worth fetching ahead for.
TEST_F(BlobLayersTest, ASmallFileReadInPiecesFetchesNothingAhead) {
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  std::string out;
  // Just short of the run that starts fetching ahead: 240 KiB over 4 chunks.
  const uint64_t piece = 16 << 10, start = 20 * kChunk;
  const uint64_t end = start + BlobLayersOptions{}.sequential_bytes - piece;
  for (uint64_t off = start; off < end; off += piece) {
    ASSERT_TRUE(layers_->Read(*layer, off, piece, &out).ok());
    EXPECT_EQ(out, blob_.substr(off, piece));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(source_.reads(), static_cast<int>((end - start + kChunk - 1) / kChunk));
  EXPECT_EQ(StatsOfLayer().prefetched, 0u);
}

TEST_F(BlobLayersTest, RandomReadsFetchNothingAhead) {
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  std::string out;
  for (uint64_t i : {40, 3, 17, 9, 55, 28})
    ASSERT_TRUE(layers_->Read(*layer, i * kChunk + 10, 4096, &out).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(source_.reads(), 6);
  EXPECT_EQ(StatsOfLayer().prefetched, 0u);
}

const std::vector<uint32_t> kTrace = {5, 3, 9, 10, 11, 40};

TEST_F(BlobLayersTest, ATracedLayerOnAColdNodeComesInOnePack) {
  PutTrace(kTrace);
  PutPack(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.packed == kTrace.size(); }));
  EXPECT_EQ(source_.pack_reads(), 1);
  EXPECT_EQ(source_.reads(), 0) << "a chunk the pack held was fetched alone";
  std::string out;
  for (uint32_t i : kTrace) {
    ASSERT_TRUE(layers_->Read(*layer, i * kChunk, kChunk, &out).ok());
    EXPECT_EQ(out, ChunkOf(i)) << i;
  }
  const LayerFetchStats s = StatsOfLayer();
  EXPECT_EQ(s.prefetched, kTrace.size());
  EXPECT_EQ(s.prefetch_hits, kTrace.size());
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.fetched_bytes, kTrace.size() * kChunk);
  EXPECT_EQ(source_.reads(), 0);
}

TEST_F(BlobLayersTest, WhatThePackLacksOrHasCorruptIsFetchedChunkByChunk) {
  PutTrace(kTrace);
  PutPack({5, 3, 9, 10}, /*corrupt=*/9);  // 11 and 40 missing; 9 bad, so 10 is not trusted
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.prefetched == kTrace.size(); }));
  LayerFetchStats s = StatsOfLayer();
  EXPECT_EQ(s.packed, 2u);
  EXPECT_EQ(source_.reads(), 4);
  std::string out;
  for (uint32_t i : kTrace) {
    ASSERT_TRUE(layers_->Read(*layer, i * kChunk, kChunk, &out).ok());
    EXPECT_EQ(out, ChunkOf(i)) << i;
  }
  s = StatsOfLayer();
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(source_.reads(), 4);
}

TEST_F(BlobLayersTest, WithoutAPackTheTraceIsFetchedChunkByChunk) {
  PutTrace(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.prefetched == kTrace.size(); }));
  EXPECT_EQ(StatsOfLayer().packed, 0u);
  EXPECT_EQ(source_.reads(), static_cast<int>(kTrace.size()));
}

// The pack streams in the order the chunks were first read: a reader of a chunk still to come
// waits for it there instead of fetching it a second time.
TEST_F(BlobLayersTest, AReaderWaitsForItsChunkInThePack) {
  source_.pack_piece = 16 << 10;
  source_.pack_delay = std::chrono::milliseconds(10);  // the pack takes ~250 ms
  PutTrace(kTrace);
  PutPack(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  std::string out;
  ASSERT_TRUE(layers_->Read(*layer, 40 * kChunk + 5, 1000, &out).ok());
  EXPECT_EQ(out, ChunkOf(40).substr(5, 1000));
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.packed == kTrace.size(); }));
  EXPECT_EQ(source_.reads(), 0);
}

// A trace larger than a pack holds: readers wait on the pack only for what it can bring, the
// rest comes chunk by chunk.
TEST_F(BlobLayersTest, ChunksPastThePacksBoundAreFetchedChunkByChunk) {
  BlobLayersOptions opts;
  opts.pack_max_bytes = 3 * (kChunk + 64);
  layers_ = std::make_unique<BlobLayers>(store_.get(), &source_, cache_.get(), opts);
  PutTrace(kTrace);
  PutPack({5, 3, 9});  // what a node with that bound publishes
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.prefetched == kTrace.size(); }));
  EXPECT_EQ(StatsOfLayer().packed, 3u);
  EXPECT_EQ(source_.reads(), 3);
  std::string out;
  for (uint32_t i : kTrace) {
    ASSERT_TRUE(layers_->Read(*layer, i * kChunk, kChunk, &out).ok());
    EXPECT_EQ(out, ChunkOf(i)) << i;
  }
  EXPECT_EQ(source_.reads(), 3);
}

// A node that holds most of the traced chunks (another version of the layer shares them)
// fetches the few it lacks, not the whole pack.
TEST_F(BlobLayersTest, ANodeHoldingMostOfTheTraceSkipsThePack) {
  PutTrace(kTrace);
  PutPack(kTrace);
  for (uint32_t i : {5, 3, 9, 10}) cache_->Insert(hexes_[i], ChunkOf(i));
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.prefetched == 2; }));
  EXPECT_EQ(source_.pack_reads(), 0);
  EXPECT_EQ(source_.reads(), 2);
}

TEST_F(BlobLayersTest, ARecordedTraceIsPublishedWithItsPack) {
  BlobLayersOptions opts;
  opts.trace_window_s = 0.2;
  layers_ = std::make_unique<BlobLayers>(store_.get(), &source_, cache_.get(), opts);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  std::string out;
  for (uint32_t i : {7, 2, 8}) ASSERT_TRUE(layers_->Read(*layer, i * kChunk, 100, &out).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(layers_->Read(*layer, 20 * kChunk, 100, &out).ok());  // ends the recording
  for (int i = 0; i < 500 && source_.Pack(hex_).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (int i = 0; i < 500 && source_.Trace(hex_).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(source_.Trace(hex_), "[7,2,8]");
  std::vector<std::string> got;
  PackReader reader(kChunk, [&](const std::string& hex, std::string_view bytes) {
    EXPECT_EQ(Sha256Hex(bytes), hex);
    got.push_back(hex);
    return true;
  });
  EXPECT_TRUE(reader.Feed(source_.Pack(hex_)));
  EXPECT_TRUE(reader.Complete());
  EXPECT_EQ(got, (std::vector<std::string>{hexes_[7], hexes_[2], hexes_[8]}));
}

// What the page cache filler is handed: each traced chunk once, as (blob offset, bytes).
struct Handed {
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::string>> chunks;
  std::function<bool(uint64_t, std::string_view)> Fn() {
    return [this](uint64_t off, std::string_view bytes) {
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(off, std::string(bytes));
      return true;
    };
  }
};

TEST_F(BlobLayersTest, TracedChunksAreHandedToTheFillerAsThePackBringsThem) {
  source_.pack_piece = 16 << 10;
  source_.pack_delay = std::chrono::milliseconds(5);
  PutTrace(kTrace);
  PutPack(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  Handed handed;
  std::atomic<bool> cancel{false};
  layers_->ForEachTracedChunk(*layer, handed.Fn(), cancel);
  ASSERT_EQ(handed.chunks.size(), kTrace.size());
  std::set<uint64_t> offsets;
  for (auto& [off, bytes] : handed.chunks) {
    offsets.insert(off);
    EXPECT_EQ(bytes, ChunkOf(static_cast<uint32_t>(off / kChunk))) << off;
  }
  EXPECT_EQ(offsets.size(), kTrace.size()) << "a chunk handed twice";
  for (uint32_t i : kTrace) EXPECT_TRUE(offsets.count(i * kChunk)) << i;
  EXPECT_EQ(StatsOfLayer().page_cached, kTrace.size());
  EXPECT_EQ(source_.reads(), 0) << "the filler fetched a chunk itself";
}

TEST_F(BlobLayersTest, TheFillerGoesOnWithoutAChunkThatCannotBeFetched) {
  PutTrace(kTrace);
  PutPack({5, 3, 9});                // the pack lacks 10, 11 and 40; the store lacks 11
  source_.chunks.erase(hexes_[11]);  // (before any worker runs: Open has not been called)
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  Handed handed;
  std::atomic<bool> cancel{false};
  layers_->ForEachTracedChunk(*layer, handed.Fn(), cancel);  // returns: nothing waits on 11
  std::set<uint64_t> offsets;
  for (auto& [off, bytes] : handed.chunks) offsets.insert(off);
  EXPECT_EQ(offsets,
            (std::set<uint64_t>{5 * kChunk, 3 * kChunk, 9 * kChunk, 10 * kChunk, 40 * kChunk}));
}

TEST_F(BlobLayersTest, OnAWarmNodeTheFillerGetsEveryTracedChunkAtOnce) {
  for (uint32_t i : kTrace) cache_->Insert(hexes_[i], ChunkOf(i));
  PutTrace(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  Handed handed;
  std::atomic<bool> cancel{false};
  layers_->ForEachTracedChunk(*layer, handed.Fn(), cancel);
  EXPECT_EQ(handed.chunks.size(), kTrace.size());
  EXPECT_EQ(source_.reads() + source_.pack_reads(), 0);
}

TEST_F(BlobLayersTest, TheFillerStopsAtCancelOrWhenItsTakerDeclines) {
  source_.pack_piece = 16 << 10;
  source_.pack_delay = std::chrono::milliseconds(50);  // the pack takes ~1.2 s
  PutTrace(kTrace);
  PutPack(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
  });
  Handed handed;
  layers_->ForEachTracedChunk(*layer, handed.Fn(), cancel);  // returns soon after the cancel
  canceller.join();
  EXPECT_LT(handed.chunks.size(), kTrace.size());
  // A taker that declines the first chunk ends the walk there.
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.packed == kTrace.size(); }));
  cancel = false;
  int offered = 0;
  layers_->ForEachTracedChunk(
      *layer, [&](uint64_t, std::string_view) { return ++offered, false; }, cancel);
  EXPECT_EQ(offered, 1);
}

// The filler (blobfs/page_cache_filler.h) with a fake store in place of FUSE_NOTIFY_STORE.
TEST_F(BlobLayersTest, TheFillerStoresEachTracedChunkOncePerInode) {
  PutTrace(kTrace);
  PutPack(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  std::mutex mu;
  std::map<uint64_t, std::vector<uint64_t>> stored;  // by inode: offsets
  PageCacheFiller filler(layers_.get(), [&](uint64_t ino, uint64_t off, std::string_view bytes) {
    EXPECT_EQ(bytes, ChunkOf(static_cast<uint32_t>(off / kChunk)));
    std::lock_guard<std::mutex> lock(mu);
    stored[ino].push_back(off);
    return 0;
  });
  filler.Start(7, *layer);
  filler.Start(7, *layer);  // a second open of the same inode
  ASSERT_TRUE(StatsReach([](const LayerFetchStats& s) { return s.page_cached == kTrace.size(); }));
  EXPECT_TRUE(filler.Stop(std::chrono::seconds(5)));
  filler.Start(8, *layer);                                      // after Stop: nothing starts
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // time to (wrongly) store
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[7].size(), kTrace.size());
}

TEST_F(BlobLayersTest, AnInodeTheKernelForgotEndsItsFill) {
  for (uint32_t i : kTrace) cache_->Insert(hexes_[i], ChunkOf(i));
  PutTrace(kTrace);
  auto layer = layers_->Open(hex_);
  ASSERT_TRUE(layer.ok());
  std::atomic<int> calls{0};
  PageCacheFiller filler(layers_.get(), [&](uint64_t, uint64_t, std::string_view) {
    ++calls;
    return -ENOENT;
  });
  filler.Start(3, *layer);
  for (int i = 0; i < 500 && calls == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // time to (wrongly) go on
  EXPECT_TRUE(filler.Stop(std::chrono::seconds(5)));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(StatsOfLayer().page_cached, 0u);
}

}  // namespace
}  // namespace warren::blobfs
