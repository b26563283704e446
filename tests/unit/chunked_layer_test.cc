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
#include <set>

#include "base/sha256.h"
#include "base/subprocess.h"
#include "image/erofs_chunk_map.h"
#include "image/layer_store.h"
#include "image/tar_create.h"
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

TEST_F(ChunkedLayerTest, ManifestRoundTripsAndRefusesWhatIsMalformed) {
  ChunkedLayer l;
  l.meta_sha256 = std::string(64, 'a');
  l.meta_size = 8192;
  l.blob_size = 3 << 20;
  l.chunk_size = 1 << 20;
  l.block_size = 4096;
  l.chunks = {{0, 1 << 20, std::string(64, 'b')}, {1 << 20, 8192, std::string(64, 'c')}};
  const std::string text = EncodeManifest(l);
  auto back = DecodeManifest(text, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeManifest(*back), text);
  EXPECT_EQ(back->ChunkBytes(), (1u << 20) + 8192);
  EXPECT_EQ(back->FirstChunkEndingAfter(0), 0u);
  EXPECT_EQ(back->FirstChunkEndingAfter((1 << 20) - 1), 0u);
  EXPECT_EQ(back->FirstChunkEndingAfter(1 << 20), 1u);
  EXPECT_EQ(back->FirstChunkEndingAfter((1 << 20) + 8192), 2u);
  Write(dir_ + "/m", text);
  EXPECT_TRUE(IsManifestFile(dir_ + "/m"));

  auto refused = [&](ChunkedLayer bad, const std::string& why) {
    auto r = DecodeManifest(EncodeManifest(bad), "test");
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
  ASSERT_TRUE(node.Ensure(info->digest).ok());
  EXPECT_TRUE(node.IsChunked(info->digest));
  EXPECT_EQ(Read(node.MetaPath(m->meta_sha256)), Read(shared.MetaPath(m->meta_sha256)));
  // Only the manifest and metadata: chunks come when read.
  EXPECT_FALSE(fs::exists(node.ChunkPath(m->chunks[0].sha256)));

  // A corrupt metadata image in the store is refused and not kept.
  ASSERT_TRUE(node.Remove(info->digest).ok());
  EXPECT_FALSE(fs::exists(node.MetaPath(m->meta_sha256)));
  fs::permissions(shared.MetaPath(m->meta_sha256), fs::perms::owner_write, fs::perm_options::add);
  {
    std::fstream f(shared.MetaPath(m->meta_sha256),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('X');
  }
  Status st = node.Ensure(info->digest);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(fs::exists(node.MetaPath(m->meta_sha256)));

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

  // Collection: nothing named is removed; once the manifest is gone, everything is.
  EXPECT_EQ(shared.CollectChunks(0), 0u);
  ASSERT_TRUE(shared.Remove(info->digest).ok());
  EXPECT_EQ(shared.CollectChunks(3600), 0u);  // all too young
  EXPECT_EQ(shared.CollectChunks(0), m->chunks.size());
  for (const auto& c : m->chunks) EXPECT_FALSE(fs::exists(shared.ChunkPath(c.sha256)));
}

}  // namespace
}  // namespace warren::image
