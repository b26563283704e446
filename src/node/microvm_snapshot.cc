#include "node/microvm_snapshot.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/unique_fd.h"
#include "image/tar_extract.h"

namespace warren::node {

Status MicrovmSnapshotTree(image::LayerStore* store, image::ErofsMountCache* mounts,
                           AgentConn& conn, const std::string& id, const std::string& workspace,
                           int dst, const std::string& work,
                           const isolation::LayerTreeOptions& opts,
                           isolation::LayerTreeStats* stats) {
  // The guest's ids are the layer's: nothing to shift.
  isolation::LayerTreeOptions own = opts;
  own.id_base = 0;
  // The workspace layer from this node's copy of its blob: the guest mounts the same bytes.
  if (!workspace.empty()) {
    WARREN_RETURN_IF_ERROR(store->Ensure(workspace));
    auto mount = WARREN_TRY(mounts->Acquire(workspace, store->BlobPath(workspace)));
    UniqueFd root(openat(mount->fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return ErrnoStatus("open workspace layer", workspace);
    WARREN_RETURN_IF_ERROR(isolation::ApplyLayerTree(root.get(), dst, own, stats));
  }
  // The writable layer is in the guest: its agent streams it as a tar, unpacked beside the
  // tree (its whiteouts and opaque marks as they are), then applied like a container's.
  const std::string tar = work + "/upper.tar", upper = work + "/upper";
  {
    UniqueFd out(open(tar.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out) return ErrnoStatus("create", tar);
    // The guest is the occupant's: what it sends is bounded like the tree it stands for
    // (tar headers: 64 MiB more).
    const uint64_t cap = opts.max_bytes + (64ull << 20);
    uint64_t got = 0;
    WARREN_RETURN_IF_ERROR(conn.StreamSnapshot([&](std::string_view bytes) -> Status {
      got += bytes.size();
      if (got > cap)
        return Status(Code::kQuota, "snapshot", id,
                      "its writable layer passes " + std::to_string(opts.max_bytes >> 20) +
                          " MiB, the most this snapshot may hold");
      while (!bytes.empty()) {
        const ssize_t n = write(out.get(), bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoStatus("write", "snapshot stream");
        bytes.remove_prefix(static_cast<size_t>(n));
      }
      return Status::Ok();
    }));
  }
  if (mkdir(upper.c_str(), 0755) != 0) return ErrnoStatus("mkdir", upper);
  image::ExtractLimits limits;
  limits.max_bytes = opts.max_bytes;
  limits.oci_whiteouts = false;
  if (Status st = image::ExtractTar(tar, upper, limits); !st.ok()) {
    if (st.err() == ENOSPC) return st;  // made again on disk
    spdlog::warn("snapshot of {}: the guest's tar: {}", id, st.ToString());
    return Status(Code::kInternal, "snapshot", id, "the guest's writable layer could not be read");
  }
  unlink(tar.c_str());
  UniqueFd ufd(open(upper.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!ufd) return ErrnoStatus("open", upper);
  return isolation::ApplyLayerTree(ufd.get(), dst, own, stats);
}

}  // namespace warren::node
