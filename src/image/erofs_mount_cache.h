// One host mount per layer blob, shared by every sandbox using it.
//
// A layer is mounted once as a detached file-backed EROFS mount (held only by an fd, never
// attached to the host's tree) with directio, so N sandboxes share one page cache instead of
// caching the backing file too. Each sandbox gets an idmapped open_tree clone of it. The
// mount goes away when the last LayerMount reference drops (unmounted when idle). Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"

namespace warren::image {

struct LayerMount {
  std::string digest;
  UniqueFd fd;  // detached read-only EROFS mount
};

class ErofsMountCache {
 public:
  // `device_path`: a chunked layer's blob file (blobfsd's, or a local copy) behind the
  // metadata image at `blob_path`; empty for a whole image. `readahead_kb`: the mount's
  // readahead window when it is not the kernel's default (for a layer read on demand, where
  // every page read ahead may be a fetch). It applies when this call mounts.
  Result<std::shared_ptr<LayerMount>> Acquire(const std::string& digest,
                                              const std::string& blob_path,
                                              const std::string& device_path = "",
                                              std::optional<uint32_t> readahead_kb = {});
  // Later Acquires of `digest` mount afresh; holders keep the mount they have. For a
  // chunked layer whose blob file died with its blobfsd.
  void Forget(const std::string& digest);
  size_t live() const;

 private:
  mutable Mutex mu_;
  // By digest and device path ("<digest>\n<device>").
  std::map<std::string, std::weak_ptr<LayerMount>> mounts_ GUARDED_BY(mu_);
};

// Mounts one EROFS image (file-backed) as a detached read-only mount; with `device_path`,
// the image is a chunked layer's metadata and that file its data (`device=`).
// `direct_io`: EROFS reads its files with direct I/O, so their bytes are not cached twice
// (in EROFS's page cache and the file's). A layer read on demand is mounted without it: its
// data file is blobfsd's, whose page cache blobfsd fills ahead of reads
// (blobfs/page_cache_filler.h), and direct I/O would make every read a request to blobfsd.
Result<UniqueFd> MountErofsBlob(const std::string& blob_path, const std::string& device_path = "",
                                bool direct_io = true);

}  // namespace warren::image
