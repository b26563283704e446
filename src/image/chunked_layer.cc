#include "image/chunked_layer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_fields.h"
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
  json j = json::parse(bytes, nullptr, false);
  if (j.is_discarded()) return Invalid("layer manifest: not JSON", what);
  JsonFields f(j, "layer manifest " + what);
  WARREN_RETURN_IF_ERROR(f.Object());
  std::string format;
  const json* meta = nullptr;
  const json* chunks = nullptr;
  uint64_t block_size = 0;
  ChunkedLayer l;
  WARREN_RETURN_IF_ERROR(f.String("format", &format));
  WARREN_RETURN_IF_ERROR(f.Value("meta", &meta));
  WARREN_RETURN_IF_ERROR(f.UInt("blob_size", &l.blob_size));
  WARREN_RETURN_IF_ERROR(f.UInt("chunk_size", &l.chunk_size));
  WARREN_RETURN_IF_ERROR(f.UInt("block_size", &block_size));
  WARREN_RETURN_IF_ERROR(f.Value("chunks", &chunks));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  if (format != kFormat) return Invalid("layer manifest: unknown format " + format, what);
  JsonFields m(*meta, "layer manifest meta");
  WARREN_RETURN_IF_ERROR(m.Object());
  WARREN_RETURN_IF_ERROR(m.String("sha256", &l.meta_sha256));
  WARREN_RETURN_IF_ERROR(m.UInt("size", &l.meta_size));
  WARREN_RETURN_IF_ERROR(m.NoOthers());
  if (!IsSha256Hex(l.meta_sha256)) return Invalid("layer manifest: bad meta digest", what);
  if (!PowerOfTwo(block_size) || block_size < 512 || block_size > 65536)
    return Invalid("layer manifest: bad block size", what);
  l.block_size = static_cast<uint32_t>(block_size);
  if (!PowerOfTwo(l.chunk_size) || l.chunk_size < block_size || l.chunk_size > (64ull << 20))
    return Invalid("layer manifest: bad chunk size", what);
  if (!chunks->is_array()) return Invalid("layer manifest: chunks is not an array", what);
  l.chunks.reserve(chunks->size());
  uint64_t end = 0;
  for (const json& c : *chunks) {
    if (!c.is_array() || c.size() != 3 || !c[0].is_number_unsigned() ||
        !c[1].is_number_unsigned() || !c[2].is_string())
      return Invalid("layer manifest: a chunk is not [offset, length, sha256]", what);
    LayerChunk lc{c[0].get<uint64_t>(), c[1].get<uint64_t>(), c[2].get<std::string>()};
    if (!IsSha256Hex(lc.sha256)) return Invalid("layer manifest: bad chunk digest", what);
    if (lc.offset % block_size || lc.length == 0 || lc.length % block_size ||
        lc.length > l.chunk_size || lc.offset < end || lc.offset > l.blob_size ||
        lc.length > l.blob_size - lc.offset)
      return Invalid("layer manifest: chunk at " + std::to_string(lc.offset) +
                         " is misaligned, overlaps another or lies past the blob",
                     what);
    end = lc.offset + lc.length;
    l.chunks.push_back(std::move(lc));
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
