// Where a chunk-indexed EROFS image keeps its file data on its extra device.
//
// `mkfs.erofs --chunksize=N --blobdev=BLOB META TREE` (erofs-utils 1.5) writes inodes,
// directories and xattrs to META and the data of every regular file, as chunks of N bytes
// (the last one of a file shorter), to BLOB. Each chunk starts on a block boundary and
// identical chunks are stored once. This reads META's directory tree and each file's chunk
// index to list those chunks: their offsets and lengths in BLOB, padded to the block size.
//
// A chunk is a slice of one file's content, so an unchanged file gives the same chunk bytes
// in the next build of a layer wherever they land in BLOB: content-addressing the chunks
// dedups across versions with an unmodified mkfs.erofs (the idea of Nydus's chunk dict).
//
// The image is untrusted input (a store's bytes): every offset is bounds-checked, loops are
// bounded by the image's size, and any inconsistency is kInvalid, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::image {

struct BlobExtent {
  uint64_t offset = 0;  // in the extra device (the blob), a multiple of the block size
  uint64_t length = 0;  // a multiple of the block size, at most the chunk size rounded up
  bool operator==(const BlobExtent&) const = default;
};

struct ErofsChunkMap {
  uint32_t block_size = 0;
  uint64_t chunk_size = 0;  // 0 when no file is chunk-indexed
  // Sorted by offset, disjoint, each listed once however many files share it.
  std::vector<BlobExtent> extents;
  // Regular files whose data lives in the image itself (inline or plain) rather than the blob.
  uint64_t files_in_meta = 0;
};

// Reads the image at `meta_path`. Only device 1 (the first extra device) is mapped; a chunk
// on any other device is kInvalid.
Result<ErofsChunkMap> MapErofsChunks(const std::string& meta_path);

}  // namespace warren::image
