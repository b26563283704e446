// A chunked layer's manifest bytes (declared in image/chunked_layer.h).
//
// v2, written since session 26, is binary: a node fetches the manifest whole before a cold
// layer's first mount, so its size is paid on every cold start. At 64 KiB chunks a 402 MiB
// image has 13,448 chunks: 1.18 MB as v1's JSON (hex digests and decimal offsets), 0.46 MB as
// v2 (34 bytes a chunk: two one-byte varints and the raw digest). v1 (JSON, canonical) is
// still read: a layer's digest is its manifest's, so layers published before stay valid.
//
// v2, little-endian:
//   "WRNLAYR" 0x02              magic and version (8 bytes)
//   u32 block_size, u32 chunk_size, u64 blob_size, u64 meta_size, 32 bytes meta sha256,
//   u64 meta_zstd_size (0: the metadata is stored whole only)
//   u64 chunk count, then per chunk, in blob order:
//     uvarint gap before it in blocks (0 for mkfs.erofs's contiguous chunks),
//     uvarint length in blocks, 32 bytes sha256
// Nothing may follow the last chunk. There is one encoding per layer, so one digest.
#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>

#include <cstring>

#include "base/sha256.h"
#include "base/unique_fd.h"
#include "image/chunked_layer.h"
#include "sys/fd_io.h"

namespace warren::image {
namespace {

constexpr std::string_view kMagicV2("WRNLAYR\x02", 8);
constexpr const char* kFormatV1 = "warren.chunked-layer/v1";
// What a v1 manifest starts with (its JSON sorts keys; "blob_size" comes first).
constexpr std::string_view kStartV1 = "{\"blob_size\":";
constexpr uint64_t kMaxManifestBytes = 64ull << 20;

bool PowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// --- v2 (binary) ---

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// `hex` is a digest as Sha256Hex writes it (the encoder's precondition).
void PutDigest(std::string* out, const std::string& hex) { out->append(Sha256RawOf(hex)); }

// Reads v2 fields from untrusted bytes: every read is bounds-checked and sticky on failure.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool ok() const { return ok_; }
  size_t left() const { return b_.size() - pos_; }
  uint64_t Le(int bytes) {
    if (!Need(static_cast<size_t>(bytes))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(b_[pos_++])) << (8 * i);
    return v;
  }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (!Need(1)) return 0;
      const auto byte = static_cast<unsigned char>(b_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte & 0x80) continue;
      if (byte == 0 && shift > 0) break;  // not minimal: one layer, one encoding
      return v;
    }
    ok_ = false;  // longer than a u64, or not minimal
    return 0;
  }
  std::string Digest() {
    if (!Need(32)) return "";
    pos_ += 32;
    return Sha256HexOf(b_.substr(pos_ - 32, 32));
  }

 private:
  bool Need(size_t n) {
    if (ok_ && left() >= n) return true;
    ok_ = false;
    return false;
  }
  std::string_view b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// The checks every manifest passes, whatever its encoding.
Status Check(ChunkedLayer& l, uint64_t block_size, const std::string& what) {
  if (!IsSha256Hex(l.meta_sha256)) return Invalid("layer manifest: bad meta digest", what);
  // zstd's worst case is a little over the input: more is not a compressed copy of it.
  if (l.meta_zstd_size > l.meta_size + l.meta_size / 64 + 1024)
    return Invalid("layer manifest: compressed metadata larger than the metadata", what);
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
  return Status::Ok();
}

Result<ChunkedLayer> DecodeV2(std::string_view bytes, const std::string& what) {
  Reader r(bytes.substr(kMagicV2.size()));
  ChunkedLayer l;
  const uint64_t block_size = r.Le(4);
  l.chunk_size = r.Le(4);
  l.blob_size = r.Le(8);
  l.meta_size = r.Le(8);
  l.meta_sha256 = r.Digest();
  l.meta_zstd_size = r.Le(8);
  const uint64_t count = r.Le(8);
  if (!r.ok()) return Invalid("layer manifest: truncated header", what);
  if (!PowerOfTwo(block_size) || block_size < 512 || block_size > 65536)
    return Invalid("layer manifest: bad block size", what);
  // Each chunk takes at least 34 bytes: a count beyond that is a lie, not an allocation.
  if (count > r.left() / 34) return Invalid("layer manifest: chunk count past its end", what);
  l.chunks.reserve(count);
  uint64_t end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t gap = r.Varint(), length = r.Varint();
    std::string sha = r.Digest();
    if (!r.ok()) return Invalid("layer manifest: truncated chunk list", what);
    if (gap > l.blob_size / block_size || length > l.blob_size / block_size)
      return Invalid("layer manifest: chunk " + std::to_string(i) + " lies past the blob", what);
    const uint64_t offset = end + gap * block_size;
    l.chunks.push_back({offset, length * block_size, std::move(sha)});
    end = offset + length * block_size;
    if (end > l.blob_size)
      return Invalid("layer manifest: chunk " + std::to_string(i) + " lies past the blob", what);
  }
  if (r.left() != 0) return Invalid("layer manifest: bytes after the last chunk", what);
  WARREN_RETURN_IF_ERROR(Check(l, block_size, what));
  return l;
}

// --- v1 (canonical JSON, read only) ---

Result<ChunkedLayer> DecodeV1(std::string_view bytes, const std::string& what) {
  // simdjson's DOM API: it picks the CPU's fastest kernel at run time (On Demand is compiled
  // for the build's baseline x86-64 and would run its scalar fallback).
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
  if (format != kFormatV1) return Invalid("layer manifest: unknown format " + format, what);
  WARREN_RETURN_IF_ERROR(Check(l, block_size, what));
  return l;
}

}  // namespace

std::string EncodeManifest(const ChunkedLayer& layer) {
  std::string out(kMagicV2);
  out.reserve(out.size() + 64 + layer.chunks.size() * 34);
  PutLe(&out, layer.block_size, 4);
  PutLe(&out, layer.chunk_size, 4);
  PutLe(&out, layer.blob_size, 8);
  PutLe(&out, layer.meta_size, 8);
  PutDigest(&out, layer.meta_sha256);
  PutLe(&out, layer.meta_zstd_size, 8);
  PutLe(&out, layer.chunks.size(), 8);
  const uint64_t bs = layer.block_size ? layer.block_size : 1;
  uint64_t end = 0;
  for (const LayerChunk& c : layer.chunks) {
    PutVarint(&out, (c.offset - end) / bs);
    PutVarint(&out, c.length / bs);
    PutDigest(&out, c.sha256);
    end = c.offset + c.length;
  }
  return out;
}

Result<ChunkedLayer> DecodeManifest(std::string_view bytes, const std::string& what) {
  if (bytes.size() > kMaxManifestBytes) return Invalid("layer manifest over 64 MiB", what);
  if (bytes.substr(0, kMagicV2.size()) == kMagicV2) return DecodeV2(bytes, what);
  if (bytes.substr(0, kStartV1.size()) == kStartV1) return DecodeV1(bytes, what);
  return Invalid("layer manifest: not a manifest (unknown start)", what);
}

bool IsManifestFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char buf[kStartV1.size()];
  const ssize_t n = pread(fd.get(), buf, sizeof buf, 0);
  if (n < 0) return false;
  const std::string_view start(buf, static_cast<size_t>(n));
  return start.substr(0, kMagicV2.size()) == kMagicV2 || start == kStartV1;
}

Result<ChunkedLayer> ReadManifestFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open layer manifest", path);
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  if (size < 0) return ErrnoStatus("seek layer manifest", path);
  if (static_cast<uint64_t>(size) > kMaxManifestBytes)
    return Invalid("layer manifest over 64 MiB", path);
  std::string bytes;
  if (lseek(fd.get(), 0, SEEK_SET) != 0 ||
      !sys::ReadFull(fd.get(), static_cast<size_t>(size), &bytes))
    return ErrnoStatus("read layer manifest", path);
  return DecodeManifest(bytes, path);
}

}  // namespace warren::image
