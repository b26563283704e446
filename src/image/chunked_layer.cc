#include "image/chunked_layer.h"

#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "base/sha256.h"
#include "base/unique_fd.h"
#include "image/erofs_chunk_map.h"

namespace warren::image {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "warren.chunked-layer/v1";
// What a manifest file starts with (EncodeManifest sorts keys; "blob_size" comes first).
constexpr std::string_view kManifestStart = "{\"blob_size\":";
constexpr uint64_t kMaxManifestBytes = 64ull << 20;

bool PowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

Status ReadAt(int fd, uint64_t off, size_t n, std::string* out, const std::string& what) {
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, out->data() + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("read", what);
    if (r == 0) return Invalid("read: the file ends before a chunk does", what);
    got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

}  // namespace

uint64_t ChunkedLayer::ChunkBytes() const {
  uint64_t n = 0;
  for (const auto& c : chunks) n += c.length;
  return n;
}

size_t ChunkedLayer::FirstChunkEndingAfter(uint64_t offset) const {
  auto it =
      std::upper_bound(chunks.begin(), chunks.end(), offset,
                       [](uint64_t off, const LayerChunk& c) { return off < c.offset + c.length; });
  return static_cast<size_t>(it - chunks.begin());
}

std::pair<size_t, size_t> ChunkedLayer::ChunksOverlapping(uint64_t from, uint64_t to) const {
  const size_t first = FirstChunkEndingAfter(from);
  auto last = std::lower_bound(chunks.begin() + static_cast<ptrdiff_t>(first), chunks.end(), to,
                               [](const LayerChunk& c, uint64_t end) { return c.offset < end; });
  return {first, static_cast<size_t>(last - chunks.begin())};
}

std::string EncodeManifest(const ChunkedLayer& layer) {
  json chunks = json::array();
  for (const auto& c : layer.chunks) chunks.push_back(json::array({c.offset, c.length, c.sha256}));
  json j = {{"format", kFormat},
            {"meta", {{"sha256", layer.meta_sha256}, {"size", layer.meta_size}}},
            {"blob_size", layer.blob_size},
            {"chunk_size", layer.chunk_size},
            {"block_size", layer.block_size},
            {"chunks", std::move(chunks)}};
  return j.dump();
}

Result<ChunkedLayer> DecodeManifest(std::string_view bytes, const std::string& what) {
  if (bytes.size() > kMaxManifestBytes) return Invalid("layer manifest over 64 MiB", what);
  // simdjson, not nlohmann: a node parses a manifest (a megabyte at 64 KiB chunks) before a
  // cold layer's first mount, twice (node and blobfsd); 11-31 ms each with nlohmann.
  // (The DOM API: it picks the CPU's fastest kernel at run time; On Demand is compiled for
  // the build's baseline x86-64 and would run its scalar fallback.)
  simdjson::dom::parser parser;
  ChunkedLayer l;
  std::string format;
  uint64_t block_size = 0;
  int seen = 0;  // bit per known key
  try {
    simdjson::dom::element doc = parser.parse(bytes.data(), bytes.size());
    for (auto [key, v] : doc.get_object()) {
      int bit;
      if (key == "blob_size") {
        bit = 1, l.blob_size = v.get_uint64();
      } else if (key == "block_size") {
        bit = 2, block_size = v.get_uint64();
      } else if (key == "chunk_size") {
        bit = 4, l.chunk_size = v.get_uint64();
      } else if (key == "format") {
        bit = 8, format = std::string_view(v.get_string());
      } else if (key == "meta") {
        bit = 16;
        int meta_seen = 0;
        for (auto [k, mv] : v.get_object()) {
          if (k == "sha256") {
            meta_seen |= 1, l.meta_sha256 = std::string_view(mv.get_string());
          } else if (k == "size") {
            meta_seen |= 2, l.meta_size = mv.get_uint64();
          } else {
            return Invalid("layer manifest meta: unknown field " + std::string(k), what);
          }
        }
        if (meta_seen != 3) return Invalid("layer manifest meta: sha256 or size missing", what);
      } else if (key == "chunks") {
        bit = 32;
        simdjson::dom::array all = v.get_array();
        l.chunks.reserve(all.size());
        for (auto c : all) {
          uint64_t n[2];
          std::string_view sha;
          size_t i = 0;
          for (auto e : c.get_array()) {
            if (i < 2)
              n[i] = e.get_uint64();
            else if (i == 2)
              sha = e.get_string();
            else
              i = 3;
            ++i;
          }
          if (i != 3)
            return Invalid("layer manifest: a chunk is not [offset, length, sha256]", what);
          l.chunks.push_back({n[0], n[1], std::string(sha)});
        }
      } else {
        return Invalid("layer manifest: unknown field " + std::string(key), what);
      }
      if (seen & bit) return Invalid("layer manifest: " + std::string(key) + " twice", what);
      seen |= bit;
    }
  } catch (const simdjson::simdjson_error& e) {
    return Invalid(std::string("layer manifest: not a manifest (") + e.what() + ")", what);
  }
  if (seen != 63) return Invalid("layer manifest: a field is missing", what);
  if (format != kFormat) return Invalid("layer manifest: unknown format " + format, what);
  if (!IsSha256Hex(l.meta_sha256)) return Invalid("layer manifest: bad meta digest", what);
  if (!PowerOfTwo(block_size) || block_size < 512 || block_size > 65536)
    return Invalid("layer manifest: bad block size", what);
  l.block_size = static_cast<uint32_t>(block_size);
  if (!PowerOfTwo(l.chunk_size) || l.chunk_size < block_size || l.chunk_size > (64ull << 20))
    return Invalid("layer manifest: bad chunk size", what);
  uint64_t end = 0;
  for (const LayerChunk& lc : l.chunks) {
    if (!IsSha256Hex(lc.sha256)) return Invalid("layer manifest: bad chunk digest", what);
    if (lc.offset % block_size || lc.length == 0 || lc.length % block_size ||
        lc.length > l.chunk_size || lc.offset < end || lc.offset > l.blob_size ||
        lc.length > l.blob_size - lc.offset)
      return Invalid("layer manifest: chunk at " + std::to_string(lc.offset) +
                         " is misaligned, overlaps another or lies past the blob",
                     what);
    end = lc.offset + lc.length;
  }
  return l;
}

bool IsManifestFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char buf[kManifestStart.size()];
  return pread(fd.get(), buf, sizeof buf, 0) == static_cast<ssize_t>(sizeof buf) &&
         std::string_view(buf, sizeof buf) == kManifestStart;
}

Result<ChunkedLayer> ReadManifestFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open layer manifest", path);
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  if (size < 0) return ErrnoStatus("seek layer manifest", path);
  if (static_cast<uint64_t>(size) > kMaxManifestBytes)
    return Invalid("layer manifest over 64 MiB", path);
  std::string bytes;
  WARREN_RETURN_IF_ERROR(ReadAt(fd.get(), 0, static_cast<size_t>(size), &bytes, path));
  return DecodeManifest(bytes, path);
}

Result<ChunkedLayer> SplitBlob(const std::string& meta_path, const std::string& blob_path,
                               const ChunkSink& put) {
  ErofsChunkMap map = WARREN_TRY(MapErofsChunks(meta_path));
  UniqueFd blob(open(blob_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!blob) return ErrnoStatus("open layer blob", blob_path);
  const off_t blob_size = lseek(blob.get(), 0, SEEK_END);
  if (blob_size < 0) return ErrnoStatus("seek layer blob", blob_path);
  ChunkedLayer l;
  l.meta_sha256 = WARREN_TRY(Sha256File(meta_path));
  UniqueFd meta(open(meta_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!meta) return ErrnoStatus("open EROFS image", meta_path);
  l.meta_size = static_cast<uint64_t>(lseek(meta.get(), 0, SEEK_END));
  l.blob_size = static_cast<uint64_t>(blob_size);
  l.block_size = map.block_size;
  l.chunk_size = map.chunk_size ? map.chunk_size : kLayerChunkSize;
  std::set<std::string> put_already;
  std::string bytes;
  for (const BlobExtent& e : map.extents) {
    if (e.offset + e.length > l.blob_size) {
      // mkfs.erofs does not pad the blob's last chunk to a block: read it short, zero-fill.
      if (e.offset >= l.blob_size || e.offset + e.length - l.blob_size >= map.block_size)
        return Invalid("split layer blob: a chunk lies past the blob's end", blob_path);
      WARREN_RETURN_IF_ERROR(
          ReadAt(blob.get(), e.offset, l.blob_size - e.offset, &bytes, blob_path));
      bytes.resize(e.length, '\0');
      l.blob_size = e.offset + e.length;
    } else {
      WARREN_RETURN_IF_ERROR(ReadAt(blob.get(), e.offset, e.length, &bytes, blob_path));
    }
    std::string hex = Sha256Hex(bytes);
    if (put_already.insert(hex).second) WARREN_RETURN_IF_ERROR(put(hex, bytes));
    l.chunks.push_back({e.offset, e.length, std::move(hex)});
  }
  return l;
}

}  // namespace warren::image
