// ChunkCache (blobfs/chunk_cache.h): an inserted chunk is served at once, from memory until its
// file is written; Flush puts every one on disk; the counters hold both; a cache over its high
// watermark evicts the least recently used chunks on disk, counting those still waiting.
#include "blobfs/chunk_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/sha256.h"
#include "test_files.h"

namespace warren::blobfs {
namespace {

namespace fs = std::filesystem;

class ChunkCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("warren-chunk-cache-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ChunkCacheTest, AnInsertedChunkIsServedAtOnceAndReachesTheDiskByFlush) {
  ChunkCache cache(dir_, 0, 0);
  ASSERT_TRUE(cache.Load().ok());
  const std::string bytes = testing::RandomBytes(50'000, 7);
  const std::string hex = Sha256Hex(bytes);
  cache.Insert(hex, bytes);
  EXPECT_TRUE(cache.Has(hex));
  std::string out(100, '\0');
  ASSERT_TRUE(cache.Read(hex, bytes.size(), 49'900, 100, out.data()));  // whether written or not
  EXPECT_EQ(out, bytes.substr(49'900));
  EXPECT_FALSE(cache.Read(hex, bytes.size(), 49'950, 100, out.data())) << "read past its end";
  EXPECT_EQ(cache.Counters().bytes, bytes.size());
  cache.Flush();
  EXPECT_EQ(testing::ReadWholeFile(cache.PathOf(hex)), bytes);
  EXPECT_EQ(cache.Counters().bytes, bytes.size());
  EXPECT_EQ(cache.Counters().chunks, 1u);
}

TEST_F(ChunkCacheTest, ChunksStillWaitingAreWrittenBeforeTheCacheGoes) {
  std::vector<std::string> hexes;
  {
    ChunkCache cache(dir_, 0, 0);
    ASSERT_TRUE(cache.Load().ok());
    for (int i = 0; i < 20; ++i) {
      const std::string bytes = testing::RandomBytes(20'000, 100 + i);
      hexes.push_back(Sha256Hex(bytes));
      cache.Insert(hexes.back(), bytes);
    }
  }
  ChunkCache again(dir_, 0, 0);
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.Counters().chunks, 20u);
  for (const auto& hex : hexes) EXPECT_TRUE(fs::exists(again.PathOf(hex))) << hex;
}

TEST_F(ChunkCacheTest, PastTheHighWatermarkTheLeastRecentlyUsedGo) {
  ChunkCache cache(dir_, 100'000, 60'000);
  ASSERT_TRUE(cache.Load().ok());
  std::vector<std::string> hexes;
  for (int i = 0; i < 5; ++i) {
    const std::string bytes = testing::RandomBytes(30'000, 200 + i);
    hexes.push_back(Sha256Hex(bytes));
    cache.Insert(hexes.back(), bytes);
    cache.Flush();
  }
  // 4 x 30 kB passed 100 kB: down to 60 kB (the 3rd and 4th); then the 5th.
  EXPECT_FALSE(cache.Has(hexes[0]));
  EXPECT_FALSE(cache.Has(hexes[1]));
  EXPECT_TRUE(cache.Has(hexes[4]));
  EXPECT_LE(cache.Counters().bytes, 100'000u);
  EXPECT_EQ(cache.Counters().evictions, 2u);
}

TEST_F(ChunkCacheTest, ChunksWaitingToBeWrittenCountAgainstTheBound) {
  // Inserted faster than they are written: what waits in memory and what is on disk together
  // never pass the high watermark (a user sized the cache; the writer's lag is not theirs).
  ChunkCache cache(dir_, 1'000'000, 800'000);
  ASSERT_TRUE(cache.Load().ok());
  std::vector<std::string> hexes;
  for (int i = 0; i < 100; ++i) {
    const std::string bytes = testing::RandomBytes(20'000, 300 + i);
    hexes.push_back(Sha256Hex(bytes));
    cache.Insert(hexes.back(), bytes);
    ASSERT_LE(cache.Counters().bytes, 1'000'000u) << "after chunk " << i;
  }
  EXPECT_TRUE(cache.Has(hexes.back())) << "the newest chunk is served";
  cache.Flush();
  EXPECT_LE(cache.Counters().bytes, 1'000'000u);
  EXPECT_GT(cache.Counters().evictions, 0u);
}

}  // namespace
}  // namespace warren::blobfs
