#include "image/erofs_mount_cache.h"

#include <spdlog/spdlog.h>
#include <sys/mount.h>

#include "sys/backing_dev.h"
#include "sys/mount_api.h"

namespace warren::image {

namespace {

// Mounts a layer read on demand (buffered, on blobfsd's file), then sets the new mount's
// readahead (see sys/backing_dev.h for how it is found). A window that cannot be set is
// logged, not an error: the mount works, it only reads more.
Result<UniqueFd> MountWithReadahead(const std::string& blob_path, const std::string& device_path,
                                    uint32_t readahead_kb) {
  auto before = sys::ListBdis("erofs-");
  UniqueFd fd = WARREN_TRY(MountErofsBlob(blob_path, device_path, /*direct_io=*/false));
  auto after = sys::ListBdis("erofs-");
  const std::string bdi = before.ok() && after.ok() ? sys::NewBdi(*before, *after) : "";
  Status st = bdi.empty() ? Status(Code::kUnavailable, "set readahead of a layer mount",
                                   device_path, "its bdi could not be told apart")
                          : sys::SetBdiReadaheadKb(bdi, readahead_kb);
  if (!st.ok()) spdlog::warn("{} (it reads ahead the kernel's default)", st.ToString());
  return fd;
}

}  // namespace

Result<UniqueFd> MountErofsBlob(const std::string& blob_path, const std::string& device_path,
                                bool direct_io) {
  const unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID;
  std::vector<std::pair<std::string, std::string>> opts;
  if (!device_path.empty()) opts.emplace_back("device", device_path);
  if (!direct_io) return sys::FsMount("erofs", blob_path, opts, attrs);
  opts.emplace_back("directio", "");
  auto m = sys::FsMount("erofs", blob_path, opts, attrs);
  // Kernels before 6.12 have file-backed EROFS but no directio option: mount without it.
  if (!m.ok() && m.status().err() == EINVAL) {
    opts.pop_back();
    m = sys::FsMount("erofs", blob_path, opts, attrs);
  }
  return m;
}

void ErofsMountCache::Forget(const std::string& digest) {
  MutexLock lock(&mu_);
  const std::string prefix = digest + '\n';
  for (auto it = mounts_.lower_bound(prefix);
       it != mounts_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
    it = mounts_.erase(it);
}

Result<std::shared_ptr<LayerMount>> ErofsMountCache::Acquire(const std::string& digest,
                                                             const std::string& blob_path,
                                                             const std::string& device_path,
                                                             std::optional<uint32_t> readahead_kb) {
  // One mount per layer and device: a chunked layer promoted to a local file is mounted anew
  // on it, while sandboxes made before keep theirs on blobfsd's file.
  const std::string key = digest + '\n' + device_path;
  MutexLock lock(&mu_);
  if (auto it = mounts_.find(key); it != mounts_.end())
    if (auto sp = it->second.lock()) return sp;
  UniqueFd fd = WARREN_TRY((readahead_kb ? MountWithReadahead(blob_path, device_path, *readahead_kb)
                                         : MountErofsBlob(blob_path, device_path)));
  auto sp = std::make_shared<LayerMount>(LayerMount{digest, std::move(fd)});
  mounts_[key] = sp;
  // Drop dead entries now and then so the map does not grow with every digest ever seen.
  for (auto it = mounts_.begin(); it != mounts_.end();)
    it = it->second.expired() ? mounts_.erase(it) : std::next(it);
  return sp;
}

size_t ErofsMountCache::live() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (auto& [d, w] : mounts_) n += !w.expired();
  return n;
}

}  // namespace warren::image
