// BlobLayers (blobfs/blob_layers.h) without FUSE: a read over several missing chunks fetches
// them in parallel, a sequential reader has the chunks after it fetched ahead (and no more
// than the window), and what a read returns is the chunks' bytes. The store is a fake whose
// every fetch takes a while, so overlap is visible.
#include "blobfs/blob_layers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "base/sha256.h"
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
  Status PublishTrace(const std::string& hex, std::string_view) override {
    return Invalid("read-only", hex);
  }
  std::string Describe() const override { return "slow fake"; }

  int max_inflight() const { return max_inflight_; }
  int reads() const { return reads_; }

 private:
  std::atomic<int> inflight_{0}, max_inflight_{0}, reads_{0};
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
    fs::remove_all(dir_);
  }

  LayerFetchStats StatsOfLayer() { return layers_->Stats().layers.at(0); }

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

}  // namespace
}  // namespace warren::blobfs
