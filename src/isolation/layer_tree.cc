#include "isolation/layer_tree.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "base/cleanup.h"
#include "base/unique_fd.h"
#include "isolation/beneath.h"
#include "sys/dir_list.h"

namespace warren::isolation {
namespace {

constexpr uint32_t kCapRevisionMask = 0xFF000000, kCapRevision2 = 0x02000000,
                   kCapRevision3 = 0x03000000;
constexpr uint16_t kAclUser = 0x02, kAclGroup = 0x08;

class Applier {
 public:
  Applier(int dst_root, const LayerTreeOptions& o, LayerTreeStats* stats)
      : stats(*stats), dst_root_(dst_root), o_(o) {}

  Status Dir(int src, int dst, const std::string& path) {
    // The occupant chooses the depth: each level here is a frame and two fds, so it is
    // bounded, as is the path (a deeper tree is unreachable by path anyway).
    if (++depth_ > kMaxDepth || path.size() > kMaxPath)
      return Invalid("deeper than " + std::to_string(kMaxDepth) + " directories or " +
                         std::to_string(kMaxPath) + " bytes of path",
                     Shown(path.substr(0, 256)));
    Cleanup up([this] { --depth_; });
    auto names = sys::ListDir(src, ".");
    if (!names.ok()) return ErrnoStatus("list directory", Shown(path));
    for (const auto& name : *names) {
      const std::string p = (path == "/" ? "" : path) + "/" + name;
      if (o_.skip.count(p)) continue;
      WARREN_RETURN_IF_ERROR(Entry(src, dst, name, p));
    }
    return Status::Ok();
  }

  LayerTreeStats& stats;

 private:
  static constexpr int kMaxDepth = 1000;
  static constexpr size_t kMaxPath = 3072;
  int depth_ = 0;

  static std::string Shown(const std::string& path) { return path.empty() ? "/" : path; }

  Result<std::pair<uid_t, gid_t>> Ids(const struct stat& st, const std::string& path) const {
    auto shift = [&](uint32_t id) -> int64_t {
      if (id < o_.id_base || id - o_.id_base >= o_.id_count) return -1;
      return id - o_.id_base;
    };
    const int64_t u = shift(st.st_uid), g = shift(st.st_gid);
    if (u < 0 || g < 0) return Invalid("an owner the sandbox has no id for", path);
    return std::pair{static_cast<uid_t>(u), static_cast<gid_t>(g)};
  }

  // Whatever `dst/name` is (ours), it goes; the directory's contents first.
  Status Remove(int dst, const std::string& name, const std::string& path) {
    if (unlinkat(dst, name.c_str(), 0) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EISDIR) return ErrnoStatus("remove", path);
    UniqueFd d(openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) return ErrnoStatus("open", path);
    auto names = sys::ListDir(d.get(), ".");
    if (!names.ok()) return names.status();
    for (const auto& n : *names) WARREN_RETURN_IF_ERROR(Remove(d.get(), n, path + "/" + n));
    if (unlinkat(dst, name.c_str(), AT_REMOVEDIR) != 0) return ErrnoStatus("remove", path);
    return Status::Ok();
  }

  // What a layer may carry from a sandbox: its own user.* names (not overlay's bookkeeping),
  // ACLs and file capabilities. Not trusted.* or other security.* names: the occupant, root
  // in its user namespace, can set those on its own files, and host root would write them
  // into a layer every node mounts.
  static bool Carried(const std::string& name) {
    if (name.rfind("user.", 0) == 0) return name.rfind("user.overlay.", 0) != 0;
    return name == "system.posix_acl_access" || name == "system.posix_acl_default" ||
           name == "security.capability";
  }

  static Result<std::vector<std::string>> XattrNames(int fd, const std::string& path) {
    std::string names(4096, '\0');
    ssize_t n = flistxattr(fd, names.data(), names.size());
    if (n < 0 && errno == ERANGE) {
      n = flistxattr(fd, nullptr, 0);
      if (n > 0) {
        names.resize(static_cast<size_t>(n));
        n = flistxattr(fd, names.data(), names.size());
      }
    }
    if (n < 0 && errno == ENOTSUP) return std::vector<std::string>{};
    if (n < 0) return ErrnoStatus("list xattrs", path);
    std::vector<std::string> out;
    for (size_t off = 0; off < static_cast<size_t>(n);) {
      out.emplace_back(names.data() + off);
      off += out.back().size() + 1;
    }
    return out;
  }

  // The carried extended attributes, exactly (a directory kept from below loses the names its
  // new source lacks), ids inside them shifted.
  Status CopyXattrs(int src_fd, int dst_fd, const std::string& path) {
    const std::vector<std::string> names = WARREN_TRY(XattrNames(src_fd, path));
    for (const std::string& name : WARREN_TRY(XattrNames(dst_fd, path)))
      if (Carried(name) && std::find(names.begin(), names.end(), name) == names.end() &&
          fremovexattr(dst_fd, name.c_str()) != 0 && errno != ENODATA)
        return ErrnoStatus("remove xattr " + name, path);
    for (const std::string& name : names) {
      if (!Carried(name)) continue;
      std::string value(65536, '\0');
      const ssize_t v = fgetxattr(src_fd, name.c_str(), value.data(), value.size());
      if (v < 0) {
        if (errno == ENODATA) continue;  // gone meanwhile
        return ErrnoStatus("read xattr " + name, path);
      }
      value.resize(static_cast<size_t>(v));
      WARREN_RETURN_IF_ERROR(ShiftXattr(name, &value, path));
      if (fsetxattr(dst_fd, name.c_str(), value.data(), value.size(), 0) != 0)
        return ErrnoStatus("write xattr " + name, path);
    }
    return Status::Ok();
  }

  Status ShiftXattr(const std::string& name, std::string* value, const std::string& path) const {
    auto shift = [&](uint32_t* id) -> bool {
      if (*id < o_.id_base || *id - o_.id_base >= o_.id_count) return false;
      *id -= o_.id_base;
      return true;
    };
    if (name == "system.posix_acl_access" || name == "system.posix_acl_default") {
      // A u32 version, then entries of {u16 tag, u16 perm, u32 id}, little-endian.
      for (size_t off = 4; off + 8 <= value->size(); off += 8) {
        uint16_t tag;
        uint32_t id;
        memcpy(&tag, value->data() + off, 2);
        memcpy(&id, value->data() + off + 4, 4);
        if (tag != kAclUser && tag != kAclGroup) continue;
        if (!shift(&id)) return Invalid("an ACL names an id outside the sandbox's", path);
        memcpy(value->data() + off + 4, &id, 4);
      }
    } else if (name == "security.capability" && value->size() == 24) {
      // Revision 3 names the root its capabilities are for: the sandbox's, which in the layer
      // is root itself, i.e. revision 2.
      uint32_t magic, root;
      memcpy(&magic, value->data(), 4);
      memcpy(&root, value->data() + 20, 4);
      if ((magic & kCapRevisionMask) == kCapRevision3) {
        if (!shift(&root) || root != 0)
          return Invalid("file capabilities for a root other than the sandbox's", path);
        magic = (magic & ~kCapRevisionMask) | kCapRevision2;
        memcpy(value->data(), &magic, 4);
        value->resize(20);
      }
    }
    return Status::Ok();
  }

  // A file's data, its holes kept, `size` bytes (its stat's: frozen, it cannot change):
  // copy_file_range within one filesystem, sendfile across two (a tmpfs upper into the
  // store's ext4: EXDEV).
  Status CopyData(int in, int out, off_t size, const std::string& path) {
    bool same_fs = true;
    for (off_t off = 0; off < size;) {
      const off_t data = lseek(in, off, SEEK_DATA);
      if (data < 0 && errno == ENXIO) break;  // a hole to the end
      if (data < 0) return ErrnoStatus("seek", path);
      off_t hole = lseek(in, data, SEEK_HOLE);
      if (hole < 0) return ErrnoStatus("seek", path);
      hole = std::min(hole, size);
      for (off_t pos = data; pos < hole;) {
        const size_t want = static_cast<size_t>(hole - pos);
        ssize_t n;
        if (same_fs) {
          loff_t ip = pos, op = pos;
          n = copy_file_range(in, &ip, out, &op, want, 0);
          if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP || errno == ENOSYS)) {
            same_fs = false;
            continue;
          }
        } else {
          off_t ip = pos;
          if (lseek(out, pos, SEEK_SET) < 0) return ErrnoStatus("seek", path);
          n = sendfile(out, in, &ip, want);
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoStatus("copy", path);
        if (n == 0) break;  // shorter than its stat said: the rest stays a hole
        pos += n;
      }
      off = hole;
    }
    if (ftruncate(out, size) != 0) return ErrnoStatus("copy", path);
    return Status::Ok();
  }

  // Owner, mode (after the owner: chown clears set-id bits), xattrs, times.
  Status Finish(int src_fd, int dst_fd, const struct stat& st, const std::string& path) {
    auto ids = WARREN_TRY(Ids(st, path));
    if (fchown(dst_fd, ids.first, ids.second) != 0) return ErrnoStatus("chown", path);
    if (fchmod(dst_fd, st.st_mode & 07777) != 0) return ErrnoStatus("chmod", path);
    WARREN_RETURN_IF_ERROR(CopyXattrs(src_fd, dst_fd, path));
    const timespec times[2] = {st.st_atim, st.st_mtim};
    if (futimens(dst_fd, times) != 0) return ErrnoStatus("set times", path);
    return Status::Ok();
  }

  Status Entry(int src, int dst, const std::string& name, const std::string& path) {
    struct stat st;
    if (fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Status::Ok();  // gone meanwhile (the sandbox runs)
      return ErrnoStatus("stat", path);
    }
    ++stats.entries;
    if (IsWhiteout(st)) {
      ++stats.whiteouts;
      WARREN_RETURN_IF_ERROR(Remove(dst, name, path));
      if (mknodat(dst, name.c_str(), S_IFCHR | 0, makedev(0, 0)) != 0)
        return ErrnoStatus("make whiteout", path);
      // Its times too: the same tree must give the same image, and digest.
      const timespec times[2] = {st.st_atim, st.st_mtim};
      if (utimensat(dst, name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
        return ErrnoStatus("set times", path);
      return Status::Ok();
    }
    if (S_ISDIR(st.st_mode)) return Directory(src, dst, name, path, st);
    if (S_ISLNK(st.st_mode)) {
      std::string target(PATH_MAX, '\0');
      const ssize_t n = readlinkat(src, name.c_str(), target.data(), target.size());
      if (n < 0) return ErrnoStatus("read symlink", path);
      target.resize(static_cast<size_t>(n));
      auto ids = WARREN_TRY(Ids(st, path));
      WARREN_RETURN_IF_ERROR(Remove(dst, name, path));
      if (symlinkat(target.c_str(), dst, name.c_str()) != 0) return ErrnoStatus("symlink", path);
      if (fchownat(dst, name.c_str(), ids.first, ids.second, AT_SYMLINK_NOFOLLOW) != 0)
        return ErrnoStatus("chown", path);
      const timespec times[2] = {st.st_atim, st.st_mtim};
      if (utimensat(dst, name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
        return ErrnoStatus("set times", path);
      return Status::Ok();
    }
    WARREN_RETURN_IF_ERROR(Remove(dst, name, path));
    // A second name of a file already copied: a link to that copy.
    const auto key = std::pair{st.st_dev, st.st_ino};
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
      if (auto it = links_.find(key); it != links_.end()) {
        if (linkat(dst_root_, it->second.c_str(), dst, name.c_str(), 0) != 0)
          return ErrnoStatus("link", path);
        return Status::Ok();
      }
    }
    if (S_ISREG(st.st_mode)) {
      UniqueFd in(OpenBeneath(src, name, O_RDONLY | O_NONBLOCK));
      if (!in) return ErrnoStatus("open", path);
      UniqueFd out(
          openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!out) return ErrnoStatus("create", path);
      // Counted at its apparent size before a byte is copied: the image mkfs.erofs makes of
      // a sparse file is dense.
      stats.bytes += static_cast<uint64_t>(st.st_size);
      if (o_.max_bytes != 0 && stats.bytes > o_.max_bytes)
        return Status(Code::kQuota, "snapshot", path,
                      "the changed files pass " + std::to_string(o_.max_bytes >> 20) +
                          " MiB, the most this snapshot may hold");
      WARREN_RETURN_IF_ERROR(CopyData(in.get(), out.get(), st.st_size, path));
      WARREN_RETURN_IF_ERROR(Finish(in.get(), out.get(), st, path));
    } else {
      // A FIFO, socket or device node: made again, same type and number.
      if (mknodat(dst, name.c_str(), st.st_mode & S_IFMT, st.st_rdev) != 0)
        return ErrnoStatus("make node", path);
      auto ids = WARREN_TRY(Ids(st, path));
      if (fchownat(dst, name.c_str(), ids.first, ids.second, AT_SYMLINK_NOFOLLOW) != 0)
        return ErrnoStatus("chown", path);
      if (fchmodat(dst, name.c_str(), st.st_mode & 07777, 0) != 0)
        return ErrnoStatus("chmod", path);
      const timespec times[2] = {st.st_atim, st.st_mtim};
      if (utimensat(dst, name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
        return ErrnoStatus("set times", path);
    }
    if (st.st_nlink > 1) links_.emplace(key, path.substr(1));
    return Status::Ok();
  }

  Status Directory(int src, int dst, const std::string& name, const std::string& path,
                   const struct stat& st) {
    UniqueFd in(OpenBeneath(src, name, O_RDONLY | O_DIRECTORY));
    if (!in) return ErrnoStatus("open directory", path);
    bool opaque = false;
    char v[4] = {};
    for (const char* x : {"user.overlay.opaque", "trusted.overlay.opaque"})
      if (fgetxattr(in.get(), x, v, sizeof v) == 1 && v[0] == 'y') opaque = true;
    // Kept as it is below unless it replaces the lower one whole (opaque) or was not one.
    struct stat was;
    const bool keep = !opaque && fstatat(dst, name.c_str(), &was, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISDIR(was.st_mode);
    if (!keep) {
      WARREN_RETURN_IF_ERROR(Remove(dst, name, path));
      if (mkdirat(dst, name.c_str(), 0700) != 0) return ErrnoStatus("mkdir", path);
    }
    UniqueFd out(openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!out) return ErrnoStatus("open directory", path);
    WARREN_RETURN_IF_ERROR(Dir(in.get(), out.get(), path));
    WARREN_RETURN_IF_ERROR(Finish(in.get(), out.get(), st, path));
    if (opaque)
      for (const char* x : {"user.overlay.opaque", "trusted.overlay.opaque"})
        if (fsetxattr(out.get(), x, "y", 1, 0) != 0) return ErrnoStatus("mark opaque", path);
    return Status::Ok();
  }

  const int dst_root_;
  const LayerTreeOptions& o_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;  // source inode -> its first copy
};

}  // namespace

Status ApplyLayerTree(int src_dirfd, int dst_dirfd, const LayerTreeOptions& opts,
                      LayerTreeStats* stats) {
  Applier a(dst_dirfd, opts, stats);
  return a.Dir(src_dirfd, dst_dirfd, "/");
}

}  // namespace warren::isolation
