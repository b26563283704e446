// BlobSource: where a cluster node gets a layer blob it does not hold. A cluster keeps its
// layers, content-addressed, in one shared store every node can reach (`--layer-store`):
//   - a directory on a shared filesystem (NFS, CephFS, GlusterFS, 3FS: any POSIX mount),
//     laid out as DIR/blobs/sha256/<hex>, as a node's own store is;
//   - an HTTP endpoint serving GET /blobs/sha256:<hex> (for example nginx over that
//     directory).
// A fetch writes the whole blob to a local file; LayerStore::Ensure verifies its digest before
// it is used. A chunked layer's blob is its manifest; its metadata image and chunks are read
// as objects (ReadObject), the chunks by blobfsd when a sandbox first reads them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace warren::image {

// The parts of a chunked layer besides its manifest (image/chunked_layer.h).
// kMetaZstd: a metadata image compressed (image/zstd_codec.h), named by the image's digest.
// kTrace and kPack sit beside a layer, named by its digest: the chunks its first reads touched
// (blobfs/blob_layers.h) and those chunks' bytes in that order (blobfs/prefetch_pack.h).
enum class ObjectKind { kChunk, kMeta, kMetaZstd, kTrace, kPack };

class BlobSource {
 public:
  virtual ~BlobSource() = default;
  // Writes blob `digest` ("sha256:<hex>") to `dest` (a new file). kNotFound when the store
  // has no such blob, kUnavailable when it cannot be reached.
  virtual Status Fetch(const std::string& digest, const std::string& dest) = 0;
  // Adds the file at `path`, whose digest is `digest`, to the store (API servers publish
  // built and uploaded layers). Atomic: readers never see a partial blob.
  virtual Status Publish(const std::string& digest, const std::string& path) = 0;
  // Reads an object named by a sha256 hex (a chunk or metadata image: its own digest; a
  // trace: its layer's): at most `max_bytes`. The caller verifies chunks and metadata.
  // kNotFound when the store has no such object.
  virtual Result<std::string> ReadObject(ObjectKind kind, const std::string& sha256_hex,
                                         uint64_t max_bytes) = 0;
  // Reads an object as it arrives: `on_bytes` gets its bytes in order, in pieces, and returns
  // false to stop early (then the call returns OK). More than `max_bytes` is kInvalid. By
  // default one piece, after ReadObject; the stores stream.
  virtual Status StreamObject(ObjectKind kind, const std::string& sha256_hex, uint64_t max_bytes,
                              const std::function<bool(std::string_view)>& on_bytes);
  // Stores a layer's prefetch trace or pack (kTrace, kPack) beside it: a directory store; an
  // HTTP one is read-only and refuses. Atomic.
  virtual Status PublishBeside(ObjectKind kind, const std::string& layer_hex,
                               std::string_view bytes) = 0;
  // For logs and errors: the directory or URL.
  virtual std::string Describe() const = 0;
};

// Where an object lives under a store's root: "chunks/sha256/ab/<hex>", "meta/sha256/<hex>",
// "traces/sha256/<layer hex>" or "packs/sha256/<layer hex>".
std::string ObjectRelPath(ObjectKind kind, const std::string& sha256_hex);

// "/shared/warren-layers" (an absolute directory) or "http(s)://HOST[:PORT][/PREFIX]".
Result<std::unique_ptr<BlobSource>> OpenBlobSource(const std::string& spec);

}  // namespace warren::image
