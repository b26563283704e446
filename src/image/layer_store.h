// Content-addressed store of EROFS layer blobs: DIR/blobs/sha256/<hex>.
//
// Blobs must live on a real filesystem (ext4, xfs, non-passthrough FUSE): file-backed EROFS
// refuses tmpfs and overlayfs backing files with ENOTBLK. Names and tags are recorded by the
// caller (the API server's state store); this class only deals in digests and files.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "image/blob_source.h"
#include "image/chunked_layer.h"

namespace warren::image {

struct BlobInfo {
  std::string digest;  // "sha256:<hex>"
  uint64_t size = 0;   // a whole image's bytes; a chunked layer's metadata and chunk bytes
  bool chunked = false;
};

// How imported trees are stored: one EROFS image (mounted from a local copy), or chunked
// (image/chunked_layer.h: a manifest, a metadata image and content-addressed chunks, which
// a node loads on demand through blobfsd).
enum class LayerFormat { kWhole, kChunked };

class LayerStore {
 public:
  explicit LayerStore(std::string root) : root_(std::move(root)) {}

  // Creates the directories.
  Status Init();
  // What ImportTar writes (default kWhole). Uploaded EROFS images are always kept whole.
  void SetFormat(LayerFormat format) { format_ = format; }
  LayerFormat format() const { return format_; }
  // Builds an EROFS image from a tar file (mkfs.erofs over the unpacked tree) and stores it.
  Result<BlobInfo> ImportTar(const std::string& tar_path);
  // Builds an EROFS image of the tree at `dir` (ours, not a tenant's: mkfs.erofs reads it
  // by path) in `format` and stores it. The same tree always gives the same digest.
  Result<BlobInfo> ImportTree(const std::string& dir, LayerFormat format);
  // Hands blob `digest` (held here) to the source this store is a cache of, for other nodes
  // and API servers to use (a sandbox's snapshot, made on its node). Without a source the
  // store is the one everybody reads: nothing to do. kUnavailable for a read-only source.
  Status PublishToSource(const std::string& digest);
  // Stores a file that already is an EROFS image (checked by its superblock magic).
  Result<BlobInfo> ImportErofs(const std::string& path);
  // True if `path` starts with an EROFS superblock.
  static bool IsErofs(const std::string& path);

  // The layer's blob: a whole EROFS image, or a chunked layer's manifest.
  std::string BlobPath(const std::string& digest) const;
  bool Has(const std::string& digest) const;

  // Chunked layers. Every store (a node's, an API server's, the shared one) lays them out
  // alike: the manifest at BlobPath, the metadata image at DIR/meta/sha256/<hex>, chunks at
  // DIR/chunks/sha256/<hex[0:2]>/<hex>. On a node, chunks/ is blobfsd's cache.
  bool IsChunked(const std::string& digest) const;
  // Parsed once and kept (a manifest never changes: its digest is its name), so a create
  // does not parse a megabyte of JSON each time.
  Result<std::shared_ptr<const ChunkedLayer>> Manifest(const std::string& digest) const;
  // Where object `hex` of `kind` is kept (image/blob_source.h's layout).
  std::string ObjectPath(ObjectKind kind, const std::string& hex) const;
  std::string MetaPath(const std::string& sha256_hex) const;
  std::string ChunkPath(const std::string& sha256_hex) const;
  std::string TracePath(const std::string& layer_hex) const;
  // A chunked layer whose every chunk is in this store becomes a plain local blob file
  // (DIR/promoted/sha256/<hex>), each chunk verified as it is copied: later mounts use it
  // directly, without blobfsd. kNotFound (quickly) while a chunk is missing.
  Status Promote(const std::string& digest);
  std::string PromotedPath(const std::string& digest) const;
  bool IsPromoted(const std::string& digest) const;
  // Stores an object under its sha256 unless it is there (a trace: replaces it); one that is
  // there gets a fresh mtime, so a collection running now keeps it.
  Status PutObject(ObjectKind kind, const std::string& sha256_hex, std::string_view bytes);
  // Removes chunks and metadata images that no manifest here names and that are older than
  // `grace_s` (an import stores its chunks before its manifest). Returns how many.
  size_t CollectChunks(double grace_s);
  // A cluster node's shared store (image/blob_source.h), where missing blobs come from.
  // Outlives the store; set before use.
  void SetSource(BlobSource* source) { source_ = source; }
  // A node's store is a cache of the shared one: after each fetch, blobs are removed, least
  // recently ensured first, until their total is within `bytes` (0: no bound). A blob ensured
  // in the last `min_age_s` seconds is never removed (a create between its Ensure and its
  // mount must find it), so the bound is soft under a burst of new layers; a removed blob
  // still mounted keeps its space until unmounted, and is fetched again when next needed.
  void SetCacheLimit(uint64_t bytes, double min_age_s = 300);
  // Bytes of blobs held now (the bounded cache's use; walks the directory).
  uint64_t CachedBytes() const;
  // Makes sure blob `digest` is here: fetched from the source when missing (once, however
  // many creates ask at the same time), its sha256 checked and its EROFS superblock too
  // before it is stored. Without a source a missing blob is kNotFound. For a chunked layer
  // whose metadata must be fetched, `before_meta` runs once its manifest is here, first (the
  // node has blobfsd open the layer meanwhile).
  Status Ensure(const std::string& digest, const std::function<void()>& before_meta = nullptr);
  // Every stored blob's digest.
  std::vector<std::string> ListDigests() const;
  // Removes scratch files left by an interrupted import.
  void ClearTemp() const;
  Status Remove(const std::string& digest);
  // A fresh private scratch path under the store (same filesystem as the blobs).
  std::string TempPath(const std::string& what) const;

 private:
  Result<BlobInfo> Commit(const std::string& tmp_file);
  Result<BlobInfo> ImportTreeChunked(const std::string& tree);
  // The blob (or manifest) is here, fetched from the source if it is not.
  Status EnsureBlob(const std::string& digest);
  // A chunked layer's metadata image is here, fetched from the source if it is not.
  Status EnsureMeta(const std::string& digest, const std::function<void()>& before_fetch);
  Status Fetch(const std::string& digest);
  // Removes least recently used blobs beyond the cache limit (never `keep`).
  void Trim(const std::string& keep);
  void NoteUse(const std::string& digest);
  std::string root_;
  LayerFormat format_ = LayerFormat::kWhole;
  BlobSource* source_ = nullptr;
  mutable Mutex manifest_mu_;
  mutable std::map<std::string, std::shared_ptr<const ChunkedLayer>> manifests_
      GUARDED_BY(manifest_mu_);
  Mutex fetch_mu_;
  std::condition_variable_any fetched_;
  std::set<std::string> fetching_ GUARDED_BY(fetch_mu_);
  uint64_t cache_limit_ GUARDED_BY(fetch_mu_) = 0;
  double cache_min_age_s_ GUARDED_BY(fetch_mu_) = 300;
  // digest -> monotonic seconds of its last Ensure (blobs found at start: their mtime's age).
  std::map<std::string, double> last_used_ GUARDED_BY(fetch_mu_);
};

}  // namespace warren::image
