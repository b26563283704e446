#include "image/erofs_mount_cache.h"

#include <sys/mount.h>

#include "sys/mount_api.h"

namespace warren::image {

Result<UniqueFd> MountErofsBlob(const std::string& blob_path, const std::string& device_path) {
  const unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID;
  std::vector<std::pair<std::string, std::string>> opts;
  if (!device_path.empty()) opts.emplace_back("device", device_path);
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
                                                             const std::string& device_path) {
  // One mount per layer and device: a chunked layer promoted to a local file is mounted anew
  // on it, while sandboxes made before keep theirs on blobfsd's file.
  const std::string key = digest + '\n' + device_path;
  MutexLock lock(&mu_);
  if (auto it = mounts_.find(key); it != mounts_.end())
    if (auto sp = it->second.lock()) return sp;
  UniqueFd fd = WARREN_TRY(MountErofsBlob(blob_path, device_path));
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
