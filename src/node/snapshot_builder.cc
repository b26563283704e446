#include "node/snapshot_builder.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "base/cleanup.h"
#include "base/ids.h"
#include "base/unique_fd.h"
#include "image/tar_extract.h"
#include "sys/meminfo.h"
#include "sys/mount_api.h"

namespace warren::node {
namespace {

// Left free on the store's filesystem whatever a snapshot needs: creates still find room
// for the blobs they fetch.
constexpr uint64_t kStoreReserve = 256ull << 20;

// RAM the snapshots in progress hold for their scratch, node-wide: `ram_max` bounds all of
// them together (their pages are the daemon's), not each.
std::atomic<uint64_t> g_ram_held{0};

// Takes up to `want` bytes of the node-wide budget `max`: what it got (0: none left).
uint64_t HoldRam(uint64_t want, uint64_t max) {
  uint64_t held = g_ram_held.load();
  for (;;) {
    const uint64_t got = held >= max ? 0 : std::min(want, max - held);
    if (got == 0) return 0;
    if (g_ram_held.compare_exchange_weak(held, held + got)) return got;
  }
}

// Where a snapshot's tree is built. Making a file costs about 12 us on a tmpfs and 0.5 ms on
// this host's ext4 (its journal), and a snapshot makes one per file it holds: so a private
// tmpfs when the tree fits in RAM, else a directory in the store. Either is at `dir` in the
// store's scratch directory (mkfs.erofs reads a tree by path, and resolves a /proc/PID/fd
// link of a detached mount to "/"); LayerStore::ClearTemp unmounts what a crash left.
class Scratch {
 public:
  static Result<Scratch> InRam(const std::string& dir, uint64_t bytes) {
    Scratch s = WARREN_TRY(Make(dir));
    UniqueFd mnt = WARREN_TRY(sys::FsMount(
        "tmpfs", "warren-snapshot", {{"size", std::to_string(bytes)}, {"mode", "0755"}},
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC));
    WARREN_RETURN_IF_ERROR(sys::MoveMountTo(mnt.get(), dir));
    s.mounted_ = true;
    WARREN_RETURN_IF_ERROR(s.MakeTree());
    return s;
  }
  static Result<Scratch> OnDisk(const std::string& dir) {
    Scratch s = WARREN_TRY(Make(dir));
    WARREN_RETURN_IF_ERROR(s.MakeTree());
    return s;
  }
  Scratch() = default;
  Scratch(Scratch&& o) noexcept { *this = std::move(o); }
  Scratch& operator=(Scratch&& o) noexcept {
    Clear();
    dir_ = std::move(o.dir_);
    path_ = std::exchange(o.path_, "");
    mounted_ = std::exchange(o.mounted_, false);
    return *this;
  }
  ~Scratch() { Clear(); }

  // The layer's tree, and beside it (not in the layer) room for a backend's own scratch.
  int fd() const { return dir_.get(); }
  std::string tree() const { return path_ + "/tree"; }
  std::string work() const { return path_ + "/work"; }
  bool in_ram() const { return mounted_; }

 private:
  static Result<Scratch> Make(const std::string& dir) {
    if (mkdir(dir.c_str(), 0700) != 0) return ErrnoStatus("mkdir", dir);
    Scratch s;
    s.path_ = dir;
    return s;
  }
  Status MakeTree() {
    for (const std::string& d : {tree(), work()})
      if (mkdir(d.c_str(), 0700) != 0) return ErrnoStatus("mkdir", d);
    dir_ = UniqueFd(open(tree().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir_) return ErrnoStatus("open", tree());
    return Status::Ok();
  }
  void Clear() {
    dir_.Reset();
    if (path_.empty()) return;
    if (mounted_ && umount2(path_.c_str(), MNT_DETACH) != 0)
      spdlog::warn("snapshot scratch {}: umount: {}", path_, strerror(errno));
    (void)image::RemoveTree(path_);
    path_.clear();
    mounted_ = false;
  }
  UniqueFd dir_;
  std::string path_;
  bool mounted_ = false;
};

}  // namespace

Result<SnapshotLayer> BuildSnapshotLayer(image::LayerStore* store, const std::string& id,
                                         const SnapshotSpec& spec,
                                         const std::set<std::string>& skip,
                                         const WriteTreeFn& write_tree, uint64_t ram_max) {
  // The store holds the image (about the tree's bytes), and the tree too when it is on disk.
  const std::string scratch_dir = store->TempPath("snapshot");
  struct statvfs vfs;
  const std::string store_dir = scratch_dir.substr(0, scratch_dir.rfind('/'));
  if (statvfs(store_dir.c_str(), &vfs) != 0) return ErrnoStatus("statvfs", store_dir);
  const uint64_t room = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t free_room = room > kStoreReserve ? room - kStoreReserve : 0;
  const uint64_t ram = HoldRam(std::min(ram_max, sys::MeminfoBytes("MemAvailable") / 4), ram_max);
  Cleanup give_back([&] { g_ram_held -= ram; });

  isolation::LayerTreeOptions opts;
  opts.skip = skip;
  isolation::LayerTreeStats stats;
  const double t0 = NowSeconds();
  Scratch scratch;
  Status written;
  bool on_disk = true;
  // In RAM first; a tree that outgrows it (ENOSPC; EOPNOTSUPP: a tmpfs without user.* xattrs,
  // before Linux 6.6) is made again on disk.
  if (ram > 0 && free_room > 0) {
    scratch = WARREN_TRY(Scratch::InRam(scratch_dir, ram));
    opts.max_bytes = std::min(free_room, spec.max_bytes == 0 ? free_room : spec.max_bytes);
    written = write_tree(scratch.fd(), scratch.work(), opts, &stats);
    on_disk = !written.ok() && (written.err() == ENOSPC || written.err() == EOPNOTSUPP);
    if (on_disk) {
      spdlog::info("snapshot of {}: more than {} MiB, made on disk", id, ram >> 20);
      scratch = Scratch();  // unmounted and removed
      stats = {};
    }
  }
  if (on_disk) {
    scratch = WARREN_TRY(Scratch::OnDisk(scratch_dir));
    // The copy and its image each take about the tree's bytes.
    const uint64_t fits = free_room / 2;
    opts.max_bytes = spec.max_bytes == 0 ? fits : std::min(spec.max_bytes, fits);
    if (opts.max_bytes == 0)
      return Status(Code::kQuota, "snapshot", id, "the node's layer store has no room left");
    written = write_tree(scratch.fd(), scratch.work(), opts, &stats);
  }
  if (!written.ok()) {
    if (written.code() == Code::kQuota && (spec.max_bytes == 0 || opts.max_bytes < spec.max_bytes))
      return Status(Code::kQuota, "snapshot", id,
                    "the node's layer store has room for " + std::to_string(opts.max_bytes >> 20) +
                        " MiB of changed files");
    return written;
  }
  // The layer's root is the conventional one whatever the umask; the sandbox's own root
  // directory is a new sandbox's (its writable layer's), so nothing of it is kept.
  const timespec zero[2] = {{0, 0}, {0, 0}};
  if (fchmod(scratch.fd(), 0755) != 0 || fchown(scratch.fd(), 0, 0) != 0 ||
      futimens(scratch.fd(), zero) != 0)
    return ErrnoStatus("set the root's metadata", "snapshot scratch");
  const double t1 = NowSeconds();
  auto blob = store->ImportTree(scratch.tree(), image::LayerFormat::kWhole);
  if (!blob.ok()) return blob.status().Context("snapshot " + id);
  const double t2 = NowSeconds();
  WARREN_RETURN_IF_ERROR(store->PublishToSource(blob->digest));
  spdlog::info(
      "snapshot of {}: {} entries, {} file bytes; tree {:.1f} ms ({}), image {:.1f} ms, "
      "publish {:.1f} ms",
      id, stats.entries, stats.bytes, (t1 - t0) * 1e3, scratch.in_ram() ? "ram" : "disk",
      (t2 - t1) * 1e3, (NowSeconds() - t2) * 1e3);
  return SnapshotLayer{blob->digest, blob->size, stats.entries, stats.bytes, stats.whiteouts};
}

}  // namespace warren::node
