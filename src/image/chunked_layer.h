// A chunked (lazily loadable) layer: an EROFS metadata image plus its data as
// content-addressed chunks, described by a manifest.
//
// Built with `mkfs.erofs --chunksize=64KiB --blobdev=BLOB META TREE`: META holds every inode,
// directory and xattr (about 0.2% of the data, LAZY-IMAGES.md); BLOB holds file data as chunks
// (image/erofs_chunk_map.h). BLOB is never stored as one object: each chunk is stored once
// under its sha256, and the manifest lists (offset in BLOB, length, sha256) per chunk. A node
// fetches META whole before mounting and each chunk the first time something reads it.
//
// The layer's digest is the sha256 of its manifest's bytes, which name META's digest and
// every chunk's: the digest pins all of the layer's content, as a whole EROFS blob's does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace warren::image {

struct LayerChunk {
  uint64_t offset = 0;  // in the blob
  uint64_t length = 0;  // bytes stored (a multiple of the block size)
  std::string sha256;   // lowercase hex of those bytes
};

struct ChunkedLayer {
  std::string meta_sha256;  // hex of the metadata image
  uint64_t meta_size = 0;
  // Bytes of the metadata image compressed with zstd, as the store also keeps it
  // (meta/sha256/<hex>.zst: what a node fetches); 0 when it is kept only whole (v1 layers).
  uint64_t meta_zstd_size = 0;
  uint64_t blob_size = 0;  // the blob file's size (chunks plus any zero gaps)
  uint64_t chunk_size = 0;
  uint32_t block_size = 0;
  std::vector<LayerChunk> chunks;  // sorted by offset, disjoint

  // Bytes of chunk data (without zero gaps).
  uint64_t ChunkBytes() const;
  // Index of the first chunk ending after `offset` (chunks.size() when none).
  size_t FirstChunkEndingAfter(uint64_t offset) const;
  // Indexes [first, last) of the chunks overlapping bytes [from, to) of the blob.
  std::pair<size_t, size_t> ChunksOverlapping(uint64_t from, uint64_t to) const;
};

// The chunk size layers are built with: the unit a node fetches, so what a cold start reads
// beyond what it needs. Measured on a 402 MiB Debian image (bench/lazy_layers.py), the chunks a
// `python3 -c 'print(1)'` fetched: 12.3 MiB at 1 MiB, 9.5 MiB at 256 KiB, 8.6 MiB at 64 KiB
// (what it reads: 3.9 MiB of pages). Smaller chunks cost more fetches, which blobfsd overlaps
// (a read's chunks in parallel, readahead for sequential readers, prefetch from traces), and
// more objects in the store: +50% at 64 KiB, since most chunks are small files anyway.
constexpr uint64_t kLayerChunkSize = 1 << 16;

// The manifest's bytes (image/layer_manifest.cc): binary v2, one encoding per layer, so the
// same layer always has the same digest. `layer`'s digests are as Sha256Hex writes them and
// its offsets and lengths are multiples of its block size.
std::string EncodeManifest(const ChunkedLayer& layer);
// Parses and checks a manifest (untrusted: from a store), v2 or the JSON v1 written before.
// `what` names it in errors.
Result<ChunkedLayer> DecodeManifest(std::string_view bytes, const std::string& what);
// True when the file at `path` starts like a manifest (a whole EROFS blob never does).
bool IsManifestFile(const std::string& path);
// Reads and decodes the manifest at `path`.
Result<ChunkedLayer> ReadManifestFile(const std::string& path);

// Splits `blob_path` by `meta_path`'s chunk map into chunks, handing each distinct one to
// `put(sha256_hex, bytes)` (which stores it unless it is there). Returns the layer
// description; `meta_sha256` and `meta_size` are filled from `meta_path`.
using ChunkSink = std::function<Status(const std::string& sha256, std::string_view bytes)>;
Result<ChunkedLayer> SplitBlob(const std::string& meta_path, const std::string& blob_path,
                               const ChunkSink& put);

}  // namespace warren::image
