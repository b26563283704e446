// The prefetch pack format (blobfs/prefetch_pack.h): what is appended is read back whole in
// pieces of any size, and a pack cut short, of another format or with an oversized record is
// refused without a chunk made up.
#include "blobfs/prefetch_pack.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/sha256.h"
#include "test_files.h"

namespace warren::blobfs {
namespace {

struct Record {
  std::string hex, bytes;
};

std::vector<Record> Sample() {
  std::vector<Record> out;
  for (int i = 0; i < 5; ++i) {
    std::string bytes = testing::RandomBytes(1000 + 7000 * static_cast<size_t>(i), 50 + i);
    out.push_back({Sha256Hex(bytes), std::move(bytes)});
  }
  return out;
}

std::string PackOf(const std::vector<Record>& records) {
  std::string pack = PackStart();
  for (const auto& r : records) AppendPackRecord(&pack, r.hex, r.bytes);
  return pack;
}

// Feeds `pack` in pieces of `piece` bytes; the records seen, and whether every Feed passed.
std::pair<std::vector<Record>, bool> ReadBack(const std::string& pack, size_t piece,
                                              uint64_t max_chunk = 1 << 20) {
  std::vector<Record> got;
  PackReader reader(max_chunk, [&](const std::string& hex, std::string_view bytes) {
    got.push_back({hex, std::string(bytes)});
    return true;
  });
  bool ok = true;
  for (size_t at = 0; at < pack.size() && ok; at += piece)
    ok = reader.Feed(std::string_view(pack).substr(at, piece));
  return {got, ok && reader.Complete()};
}

TEST(PrefetchPack, RecordsComeBackWholeInAnyPieces) {
  const auto records = Sample();
  const std::string pack = PackOf(records);
  EXPECT_EQ(pack.size(), 8 + 5 * 36 + 5 * 1000 + 7000 * 10u);
  for (size_t piece : {size_t{1}, size_t{3}, size_t{36}, size_t{4096}, pack.size()}) {
    auto [got, ok] = ReadBack(pack, piece);
    EXPECT_TRUE(ok) << piece;
    ASSERT_EQ(got.size(), records.size()) << piece;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].hex, records[i].hex);
      EXPECT_EQ(got[i].bytes, records[i].bytes);
    }
  }
  // An empty pack (a trace whose chunks were all evicted) is complete with no records.
  auto [none, ok] = ReadBack(PackStart(), 3);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(none.empty());
}

TEST(PrefetchPack, ACutPackGivesOnlyItsWholeRecordsAndIsNotComplete) {
  const auto records = Sample();
  const std::string pack = PackOf(records);
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    const size_t cut = rng() % pack.size();
    auto [got, ok] = ReadBack(pack.substr(0, cut), 1 + rng() % 5000);
    EXPECT_FALSE(ok) << cut;
    for (size_t j = 0; j < got.size(); ++j) EXPECT_EQ(got[j].bytes, records[j].bytes) << cut;
  }
}

TEST(PrefetchPack, AnotherFormatOrAnOversizedRecordIsRefused) {
  const auto records = Sample();
  std::string pack = PackOf(records);
  auto [a, ok_a] = ReadBack("WRNPACK2" + pack.substr(8), 64);
  EXPECT_FALSE(ok_a);
  EXPECT_TRUE(a.empty());
  auto [b, ok_b] = ReadBack("{\"not\": 1}", 1);
  EXPECT_FALSE(ok_b);
  // Chunks of at most 4 KiB: the second record (8,000 bytes) ends the parse.
  auto [c, ok_c] = ReadBack(pack, 512, 4096);
  EXPECT_FALSE(ok_c);
  EXPECT_EQ(c.size(), 1u);
  // A record of length zero is no chunk.
  std::string zero = PackStart() + std::string(36, '\0');
  auto [d, ok_d] = ReadBack(zero, 7);
  EXPECT_FALSE(ok_d);
  EXPECT_TRUE(d.empty());
}

TEST(PrefetchPack, TheCallbackStopsTheParse) {
  const std::string pack = PackOf(Sample());
  int seen = 0;
  PackReader reader(1 << 20, [&](const std::string&, std::string_view) { return ++seen < 2; });
  EXPECT_FALSE(reader.Feed(pack));
  EXPECT_EQ(seen, 2);
  EXPECT_FALSE(reader.Feed("more"));
  EXPECT_EQ(seen, 2);
  EXPECT_TRUE(reader.error().empty());  // stopped, not malformed
}

}  // namespace
}  // namespace warren::blobfs
