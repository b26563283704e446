// Chunked layers (image/erofs_chunk_map.h, image/chunked_layer.h, LayerStore's chunked
// format): a real mkfs.erofs 1.5 image is mapped to its chunks, unchanged files give the same
// chunks in the next version, manifests round-trip and refuse what is malformed, a hostile
// metadata image is an error and never a crash, and a node's store fetches a chunked layer's
// manifest and metadata from the shared one.
#include "image/chunked_layer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "base/sha256.h"
#include "base/subprocess.h"
#include "image/erofs_chunk_map.h"
#include "image/layer_store.h"
#include "image/tar_create.h"
#include "image/zstd_codec.h"
#include "test_files.h"

namespace warren::image {
namespace {

namespace fs = std::filesystem;

using warren::testing::RandomBytes;
constexpr auto Write = warren::testing::WriteFile;
constexpr auto Read = warren::testing::ReadWholeFile;

class ChunkedLayerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("warren-chunked-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A tree with a file over two chunks, its copy, a small file, an empty one, a hard link,
  // a symlink and nested directories.
  std::string MakeTree(const std::string& name, uint32_t big_seed = 1) {
    const std::string t = dir_ + "/" + name;
    Write(t + "/big", RandomBytes(3'000'000, big_seed));
    Write(t + "/a/b/c/copy", RandomBytes(3'000'000, big_seed));
    Write(t + "/small", RandomBytes(100'000, 7));
    Write(t + "/empty", "");
    fs::create_hard_link(t + "/small", t + "/a/hard");
    fs::create_symlink("small", t + "/link");
    for (int i = 0; i < 300; ++i)
      Write(t + "/many/f" + std::to_string(i), "file " + std::to_string(i));
    return t;
  }

  // mkfs.erofs 1.5 as LayerStore runs it for a chunked layer.
  void Mkfs(const std::string& tree, const std::string& meta, const std::string& blob) {
    auto r = RunProgram(
        {"mkfs.erofs", "--quiet", "-x1", "--chunksize=1048576", "--blobdev=" + blob, meta, tree});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->exit_code, 0) << r->output;
  }

  std::string dir_;
};

TEST_F(ChunkedLayerTest, MapsEveryChunkOnceAndCoversTheBlob) {
  const std::string tree = MakeTree("t");
  Mkfs(tree, dir_ + "/meta", dir_ + "/blob");
  auto map = MapErofsChunks(dir_ + "/meta");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->block_size, 4096u);
  EXPECT_EQ(map->chunk_size, 1u << 20);
  // big and its copy share their three chunks (mkfs dedups within a build); small (one
  // chunk, shared with its hard link) and the 300 small files one each; the empty file none.
  uint64_t covered = 0;
  for (const auto& e : map->extents) {
    EXPECT_EQ(e.offset % 4096, 0u);
    EXPECT_EQ(e.length % 4096, 0u);
    EXPECT_LE(e.length, 1u << 20);
    covered += e.length;
  }
  EXPECT_EQ(covered, fs::file_size(dir_ + "/blob"));  // the blob is chunks and nothing else
  EXPECT_GE(map->extents.size(), 3u + 1u);
  EXPECT_LE(map->extents.size(), 3u + 1u + 300u);
}

TEST_F(ChunkedLayerTest, SplitChunksRebuildTheBlobAndUnchangedFilesDedupAcrossVersions) {
  const std::string v1 = MakeTree("v1");
  Mkfs(v1, dir_ + "/meta1", dir_ + "/blob1");
  std::map<std::string, std::string> stored;
  auto put = [&](const std::string& hex, std::string_view b) {
    EXPECT_EQ(Sha256Hex(b), hex);
    stored.emplace(hex, std::string(b));
    return Status::Ok();
  };
  auto l1 = SplitBlob(dir_ + "/meta1", dir_ + "/blob1", put);
  ASSERT_TRUE(l1.ok()) << l1.status().ToString();
  // The chunks, laid at their offsets, are the blob byte for byte.
  std::string rebuilt(l1->blob_size, '\0');
  for (const auto& c : l1->chunks) rebuilt.replace(c.offset, c.length, stored.at(c.sha256));
  std::string blob = Read(dir_ + "/blob1");
  blob.resize(l1->blob_size, '\0');
  EXPECT_EQ(rebuilt, blob);

  // Version 2: a file added before the big one (every blob offset after it moves) and
  // small changed. The big file's chunks are the same bytes, so the same digests.
  const std::string v2 = MakeTree("v2");
  Write(v2 + "/0-new", RandomBytes(500'000, 99));
  Write(v2 + "/small", RandomBytes(100'000, 8));
  Mkfs(v2, dir_ + "/meta2", dir_ + "/blob2");
  auto l2 = SplitBlob(dir_ + "/meta2", dir_ + "/blob2", put);
  ASSERT_TRUE(l2.ok()) << l2.status().ToString();
  std::set<std::string> a, b;
  for (const auto& c : l1->chunks) a.insert(c.sha256);
  for (const auto& c : l2->chunks) b.insert(c.sha256);
  const std::string big = RandomBytes(3'000'000, 1);
  for (size_t off = 0; off < big.size(); off += 1 << 20) {
    std::string piece = big.substr(off, 1 << 20);
    piece.resize((piece.size() + 4095) / 4096 * 4096, '\0');
    const std::string hex = Sha256Hex(piece);
    EXPECT_TRUE(a.count(hex)) << "chunk at " << off << " of big in v1";
    EXPECT_TRUE(b.count(hex)) << "chunk at " << off << " of big in v2";
  }
  size_t shared = 0;
  for (const auto& h : b) shared += a.count(h);
  EXPECT_GE(shared, b.size() - 2);  // all but the new file's and small's
}

// A v1 manifest as layers published before v2 have it: canonical JSON.
std::string EncodeManifestV1(const ChunkedLayer& l) {
  nlohmann::json chunks = nlohmann::json::array();
  for (const auto& c : l.chunks)
    chunks.push_back(nlohmann::json::array({c.offset, c.length, c.sha256}));
  nlohmann::json j = {{"format", "warren.chunked-layer/v1"},
                      {"meta", {{"sha256", l.meta_sha256}, {"size", l.meta_size}}},
                      {"blob_size", l.blob_size},
                      {"chunk_size", l.chunk_size},
                      {"block_size", l.block_size},
                      {"chunks", std::move(chunks)}};
  return j.dump();
}

ChunkedLayer SampleLayer() {
  ChunkedLayer l;
  l.meta_sha256 = std::string(64, 'a');
  l.meta_size = 8192;
  l.meta_zstd_size = 900;
  l.blob_size = 3 << 20;
  l.chunk_size = 1 << 20;
  l.block_size = 4096;
  l.chunks = {{0, 1 << 20, std::string(64, 'b')},
              {1 << 20, 8192, std::string(64, 'c')},
              {2 << 20, 4096, Sha256Hex("x")}};  // a gap before the last
  return l;
}

void ExpectSameLayer(const ChunkedLayer& a, const ChunkedLayer& b) {
  EXPECT_EQ(a.meta_sha256, b.meta_sha256);
  EXPECT_EQ(a.meta_size, b.meta_size);
  EXPECT_EQ(a.meta_zstd_size, b.meta_zstd_size);
  EXPECT_EQ(a.blob_size, b.blob_size);
  EXPECT_EQ(a.chunk_size, b.chunk_size);
  EXPECT_EQ(a.block_size, b.block_size);
  ASSERT_EQ(a.chunks.size(), b.chunks.size());
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    EXPECT_EQ(a.chunks[i].offset, b.chunks[i].offset) << i;
    EXPECT_EQ(a.chunks[i].length, b.chunks[i].length) << i;
    EXPECT_EQ(a.chunks[i].sha256, b.chunks[i].sha256) << i;
  }
}

TEST_F(ChunkedLayerTest, ManifestRoundTripsAndIsSmall) {
  const ChunkedLayer l = SampleLayer();
  const std::string bytes = EncodeManifest(l);
  auto back = DecodeManifest(bytes, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameLayer(*back, l);
  EXPECT_EQ(EncodeManifest(*back), bytes);  // one encoding: one digest
  EXPECT_EQ(back->ChunkBytes(), (1u << 20) + 8192 + 4096);
  EXPECT_EQ(back->FirstChunkEndingAfter(0), 0u);
  EXPECT_EQ(back->FirstChunkEndingAfter((1 << 20) - 1), 0u);
  EXPECT_EQ(back->FirstChunkEndingAfter(1 << 20), 1u);
  EXPECT_EQ(back->FirstChunkEndingAfter((1 << 20) + 8192), 2u);
  // An 80-byte header and 34 bytes a chunk (v1's JSON took about 90); the first chunk's
  // length and the last's gap take a second varint byte.
  EXPECT_EQ(bytes.size(), 80 + 35 + 34 + 35u);
  Write(dir_ + "/m", bytes);
  EXPECT_TRUE(IsManifestFile(dir_ + "/m"));
  auto read = ReadManifestFile(dir_ + "/m");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ExpectSameLayer(*read, l);
}

TEST_F(ChunkedLayerTest, ManifestV1IsStillRead) {
  ChunkedLayer l = SampleLayer();
  l.meta_zstd_size = 0;  // v1 layers keep their metadata whole only
  const std::string text = EncodeManifestV1(l);
  auto back = DecodeManifest(text, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameLayer(*back, l);
  Write(dir_ + "/m1", text);
  EXPECT_TRUE(IsManifestFile(dir_ + "/m1"));

  auto refused = [&](ChunkedLayer bad, const std::string& why) {
    auto r = DecodeManifest(EncodeManifestV1(bad), "test");
    EXPECT_FALSE(r.ok()) << why;
    if (!r.ok()) EXPECT_EQ(r.status().code(), Code::kInvalid) << why;
  };
  ChunkedLayer bad = l;
  bad.chunks[1].offset = (1 << 20) - 4096;
  refused(bad, "overlap");
  bad = l;
  bad.chunks[1].offset += 1;
  refused(bad, "misaligned");
  bad = l;
  bad.chunks[1].sha256 = "zz";
  refused(bad, "bad digest");
  bad = l;
  bad.chunks[1].offset = 3 << 20;
  refused(bad, "past the blob");
  bad = l;
  bad.chunk_size = 3000;
  refused(bad, "chunk size");
  EXPECT_FALSE(DecodeManifest("[1,2]", "test").ok());
  EXPECT_FALSE(DecodeManifest("not json", "test").ok());
  auto extra = nlohmann::json::parse(text);
  extra["surprise"] = 1;
  EXPECT_FALSE(DecodeManifest(extra.dump(), "test").ok());
}

TEST_F(ChunkedLayerTest, MalformedBinaryManifestsAreRefusedNeverACrash) {
  const ChunkedLayer l = SampleLayer();
  const std::string good = EncodeManifest(l);
  auto refused = [&](const std::string& bytes, const std::string& why) {
    auto r = DecodeManifest(bytes, "test");
    EXPECT_FALSE(r.ok()) << why;
    if (!r.ok()) EXPECT_EQ(r.status().code(), Code::kInvalid) << why;
  };
  ChunkedLayer bad = l;
  bad.chunks[2].offset = 3 << 20;
  refused(EncodeManifest(bad), "past the blob");
  bad = l;
  bad.chunk_size = 3000;
  refused(EncodeManifest(bad), "chunk size");
  bad = l;
  bad.block_size = 100;
  refused(EncodeManifest(bad), "block size");
  bad = l;
  bad.meta_zstd_size = 1 << 20;
  refused(EncodeManifest(bad), "compressed metadata larger than the metadata");
  bad = l;
  bad.chunks[0].length = 2 << 20;
  bad.chunks[1].offset = 2 << 20;
  bad.chunks[2].offset = (2 << 20) + 8192;
  refused(EncodeManifest(bad), "chunk longer than the chunk size");
  refused(good + "x", "trailing bytes");
  for (size_t n = 0; n < good.size(); ++n)
    refused(good.substr(0, n), "cut at " + std::to_string(n));
  std::string count = good;
  count[72] = '\x7f';  // the chunk count's low byte: 127 chunks in 104 bytes
  refused(count, "count past the end");
  count = good;
  count[79] = '\x7f';  // a count of about 2^63
  refused(count, "huge count");
  std::string longer = good;  // the first chunk's gap as a two-byte zero: not minimal
  longer.insert(80, 1, '\x80');
  refused(longer, "non-minimal varint");
  // Random corruption of each byte: refused or decoded, never a crash or a wild allocation.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string b = good;
    b[8 + rng() % (b.size() - 8)] = static_cast<char>(rng());
    (void)DecodeManifest(b, "test");
  }
}

TEST_F(ChunkedLayerTest, HostileMetadataIsAnErrorNeverACrash) {
  const std::string tree = MakeTree("t");
  Mkfs(tree, dir_ + "/meta", dir_ + "/blob");
  const std::string good = Read(dir_ + "/meta");
  std::mt19937 rng(42);
  int errors = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bad = good;
    // Flip a few bytes, mostly in the superblock and the inode area where it hurts most.
    for (int k = 0; k < 4; ++k) {
      const size_t at = (rng() % 2) ? 1024 + rng() % 128 : rng() % bad.size();
      bad[at] = static_cast<char>(rng());
    }
    Write(dir_ + "/bad", bad);
    auto map = MapErofsChunks(dir_ + "/bad");
    if (!map.ok()) {
      ++errors;
      EXPECT_EQ(map.status().code(), Code::kInvalid) << map.status().ToString();
    }
  }
  EXPECT_GT(errors, 0);
  Write(dir_ + "/short", good.substr(0, 1100));
  EXPECT_FALSE(MapErofsChunks(dir_ + "/short").ok());
  Write(dir_ + "/zeros", std::string(8192, '\0'));
  EXPECT_FALSE(MapErofsChunks(dir_ + "/zeros").ok());
}

TEST_F(ChunkedLayerTest, NodeStoreFetchesManifestAndMetadataAndCollectionKeepsWhatIsNamed) {
  const std::string tree = MakeTree("t");
  std::string tar;
  ASSERT_TRUE(WriteTarOfDir(tree, [&](const void* p, size_t n) {
                tar.append(static_cast<const char*>(p), n);
                return Status::Ok();
              }).ok());
  Write(dir_ + "/layer.tar", tar);

  LayerStore shared(dir_ + "/shared");
  ASSERT_TRUE(shared.Init().ok());
  shared.SetFormat(LayerFormat::kChunked);
  auto info = shared.ImportTar(dir_ + "/layer.tar");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->chunked);
  EXPECT_TRUE(shared.IsChunked(info->digest));
  auto again = shared.ImportTar(dir_ + "/layer.tar");  // reproducible: the same digest
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->digest, info->digest);
  auto got = shared.Manifest(info->digest);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto m = *got;
  EXPECT_EQ(info->size, m->meta_size + m->ChunkBytes());
  for (const auto& c : m->chunks) EXPECT_TRUE(fs::exists(shared.ChunkPath(c.sha256)));

  auto source = OpenBlobSource(dir_ + "/shared");
  ASSERT_TRUE(source.ok());
  LayerStore node(dir_ + "/node");
  ASSERT_TRUE(node.Init().ok());
  node.SetSource(source->get());
  // The manifest is here before the metadata is fetched: blobfsd can open the layer meanwhile.
  int before_meta = 0;
  ASSERT_TRUE(node.Ensure(info->digest,
                          [&] {
                            ++before_meta;
                            EXPECT_TRUE(node.Manifest(info->digest).ok());
                            EXPECT_FALSE(fs::exists(node.MetaPath(m->meta_sha256)));
                          })
                  .ok());
  EXPECT_EQ(before_meta, 1);
  ASSERT_TRUE(node.Ensure(info->digest, [&] { ++before_meta; }).ok());
  EXPECT_EQ(before_meta, 1) << "called with the metadata already here";
  EXPECT_TRUE(node.IsChunked(info->digest));
  EXPECT_EQ(Read(node.MetaPath(m->meta_sha256)), Read(shared.MetaPath(m->meta_sha256)));
  // Only the manifest and metadata: chunks come when read.
  EXPECT_FALSE(fs::exists(node.ChunkPath(m->chunks[0].sha256)));

  // The node fetched the metadata compressed (what the manifest names), not whole.
  const std::string packed_path = shared.MetaPath(m->meta_sha256) + ".zst";
  ASSERT_GT(m->meta_zstd_size, 0u);
  EXPECT_LT(m->meta_zstd_size, m->meta_size);
  EXPECT_EQ(fs::file_size(packed_path), m->meta_zstd_size);

  // A corrupt compressed metadata image in the store is refused and not kept: bytes that do
  // not decompress, and a frame that decompresses to the right size but other bytes.
  const std::string meta = Read(shared.MetaPath(m->meta_sha256));
  // Other bytes of the same size, which pack smaller than the real ones (zeros), so the frame
  // is within the size the manifest allows and only the digest can tell.
  std::string other = meta;
  std::fill(other.begin() + 1024, other.end(), '\0');
  const std::string other_packed = ZstdCompress(other);
  ASSERT_LE(other_packed.size(), m->meta_zstd_size);
  for (const std::string& bad : {Read(packed_path).substr(0, m->meta_zstd_size / 2) +
                                     std::string(m->meta_zstd_size / 2, 'x'),
                                 other_packed}) {
    ASSERT_TRUE(node.Remove(info->digest).ok());
    EXPECT_FALSE(fs::exists(node.MetaPath(m->meta_sha256)));
    fs::permissions(packed_path, fs::perms::owner_write, fs::perm_options::add);
    Write(packed_path, bad);
    Status st = node.Ensure(info->digest);
    EXPECT_EQ(st.code(), Code::kInternal) << st.ToString();
    EXPECT_FALSE(fs::exists(node.MetaPath(m->meta_sha256)));
  }

  // Promotion (the manifest is on the node): refused while a chunk is missing there; once every
  // chunk is there, a
  // plain blob file equal to mkfs's; a cached chunk that is not what it says is refused.
  EXPECT_EQ(node.Promote(info->digest).code(), Code::kNotFound);
  EXPECT_FALSE(node.IsPromoted(info->digest));
  for (const auto& c : m->chunks) {
    ASSERT_TRUE(
        node.PutObject(ObjectKind::kChunk, c.sha256, Read(shared.ChunkPath(c.sha256))).ok());
  }
  const std::string last = m->chunks.back().sha256;
  fs::permissions(node.ChunkPath(last), fs::perms::owner_write, fs::perm_options::add);
  Write(node.ChunkPath(last), "not the chunk");
  EXPECT_EQ(node.Promote(info->digest).code(), Code::kInternal);
  EXPECT_FALSE(node.IsPromoted(info->digest));
  ASSERT_TRUE(fs::remove(node.ChunkPath(last)));
  ASSERT_TRUE(node.PutObject(ObjectKind::kChunk, last, Read(shared.ChunkPath(last))).ok());
  ASSERT_TRUE(node.Promote(info->digest).ok());
  ASSERT_TRUE(node.IsPromoted(info->digest));
  std::string promoted = Read(node.PromotedPath(info->digest));
  ASSERT_EQ(promoted.size(), m->blob_size);
  for (const auto& c : m->chunks)
    EXPECT_EQ(promoted.substr(c.offset, c.length), Read(shared.ChunkPath(c.sha256)));
  ASSERT_TRUE(node.Remove(info->digest).ok());
  EXPECT_FALSE(fs::exists(node.PromotedPath(info->digest)));

  // Collection: nothing named is removed; once the manifest is gone, everything is, the
  // layer's prefetch trace and pack included.
  const std::string hex = info->digest.substr(7);
  const std::string trace = dir_ + "/shared/traces/sha256/" + hex;
  const std::string pack = dir_ + "/shared/packs/sha256/" + hex;
  Write(trace, "[0]");
  Write(pack, "WRNPACK1");
  EXPECT_EQ(shared.CollectChunks(0), 0u);
  ASSERT_TRUE(shared.Remove(info->digest).ok());
  EXPECT_EQ(shared.CollectChunks(3600), 0u);  // all too young
  EXPECT_EQ(shared.CollectChunks(0), m->chunks.size() + 2);
  for (const auto& c : m->chunks) EXPECT_FALSE(fs::exists(shared.ChunkPath(c.sha256)));
  EXPECT_FALSE(fs::exists(trace));
  EXPECT_FALSE(fs::exists(pack));
}

}  // namespace
}  // namespace warren::image
