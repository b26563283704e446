#include "image/chunked_layer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <set>

#include "base/sha256.h"
#include "base/unique_fd.h"
#include "image/erofs_chunk_map.h"

namespace warren::image {
namespace {

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
  auto last =
      std::lower_bound(chunks.begin() + static_cast<std::ptrdiff_t>(first), chunks.end(), to,
                       [](const LayerChunk& c, uint64_t end) { return c.offset < end; });
  return {first, static_cast<size_t>(last - chunks.begin())};
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
