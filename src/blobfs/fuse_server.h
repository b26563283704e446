// blobfsd's FUSE filesystem (libfuse3 low-level API): a flat read-only directory where
// `<hex>` is the blob of chunked layer sha256:<hex> (image/chunked_layer.h), read through
// BlobLayers, and `.stats` is what the daemon counts (blobfs/blobfs_stats.h).
//
// The node mounts a layer's metadata image as EROFS with `device=<mount>/<hex>`: the kernel
// reads the blob file on demand, so a sandbox starts once the metadata is local. One FUSE
// mount per node serves every layer and every sandbox, and EROFS shares its page cache.
// If this process dies, the kernel fails every read of the mount with EIO (ENOTCONN for the
// mount itself): a sandbox never reads zeros (LAZY-IMAGES.md, measured).
#pragma once

#include <cstdint>
#include <string>

#include "blobfs/blob_layers.h"

namespace warren::blobfs {

struct BlobfsdOptions {
  std::string store_root;  // the node's layer store (manifests, chunk cache)
  std::string source;      // the shared store (image::OpenBlobSource)
  // Where traces and prefetch packs are published: the store's directory when `source` is a
  // URL over it that this node may also write (`warren serve --layer-store-url`); "": source.
  std::string publish;
  std::string mountpoint;
  uint64_t cache_high = 0;  // bytes; 0: unbounded
  uint64_t cache_low = 0;
  // Put traced chunks in the kernel's page cache as they arrive (blobfs/page_cache_filler.h).
  bool fill_page_cache = true;
  // The kernel's readahead on a blob file, below the EROFS mount's own (which stops at each
  // file's end). EROFS reads it buffered, and past a file's end a page read ahead here is in
  // the next file's chunk, fetched for nothing. At 0 the kernel would read it a page per
  // request; at 4 it reads what EROFS asks in one request and over-reads by a page or two.
  uint32_t readahead_kb = 4;
  BlobLayersOptions layers;
};

// Mounts, serves until unmounted or sent SIGTERM/SIGINT, unmounts. The exit code.
int RunBlobfsd(const BlobfsdOptions& opts);

}  // namespace warren::blobfs
