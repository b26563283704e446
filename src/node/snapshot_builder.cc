#include "node/snapshot_builder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

#include "base/cleanup.h"
#include "base/unique_fd.h"
#include "image/tar_extract.h"

namespace warren::node {
namespace {

// Left free on the store's filesystem whatever a snapshot needs: creates still find room
// for the blobs they fetch.
constexpr uint64_t kStoreReserve = 256ull << 20;

}  // namespace

Result<SnapshotLayer> BuildSnapshotLayer(image::LayerStore* store, const std::string& id,
                                         const SnapshotSpec& spec,
                                         const std::set<std::string>& skip,
                                         const WriteTreeFn& write_tree) {
  const std::string dir = store->TempPath("snapshot");
  if (mkdir(dir.c_str(), 0755) != 0) return ErrnoStatus("mkdir", dir);
  Cleanup rm([&] { (void)image::RemoveTree(dir); });
  UniqueFd dfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) return ErrnoStatus("open", dir);
  // The layer's root is the conventional one whatever the umask; the sandbox's own root
  // directory is a new sandbox's (its writable layer's), so nothing of it is kept.
  if (fchmod(dfd.get(), 0755) != 0) return ErrnoStatus("chmod", dir);

  struct statvfs vfs;
  if (fstatvfs(dfd.get(), &vfs) != 0) return ErrnoStatus("statvfs", dir);
  const uint64_t room = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  // The copy and its image each take about the tree's bytes.
  const uint64_t fits = room > kStoreReserve ? (room - kStoreReserve) / 2 : 0;
  isolation::LayerTreeOptions opts;
  opts.skip = skip;
  opts.max_bytes = spec.max_bytes == 0 ? fits : std::min(spec.max_bytes, fits);
  if (opts.max_bytes == 0)
    return Status(Code::kQuota, "snapshot", id, "the node's layer store has no room left");
  isolation::LayerTreeStats stats;
  if (Status st = write_tree(dfd.get(), opts, &stats); !st.ok()) {
    if (st.code() == Code::kQuota && (spec.max_bytes == 0 || opts.max_bytes < spec.max_bytes))
      return Status(Code::kQuota, "snapshot", id,
                    "the node's layer store has room for " + std::to_string(opts.max_bytes >> 20) +
                        " MiB of changed files");
    return st;
  }
  const timespec zero[2] = {{0, 0}, {0, 0}};
  if (futimens(dfd.get(), zero) != 0) return ErrnoStatus("set times", dir);
  auto blob = store->ImportTree(dir, image::LayerFormat::kWhole);
  if (!blob.ok()) return blob.status().Context("snapshot " + id);
  WARREN_RETURN_IF_ERROR(store->PublishToSource(blob->digest));
  return SnapshotLayer{blob->digest, blob->size, stats.entries, stats.bytes, stats.whiteouts};
}

}  // namespace warren::node
