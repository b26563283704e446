#include "isolation/overlay_changes.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "base/unique_fd.h"
#include "isolation/beneath.h"
#include "isolation/fs_policy.h"
#include "sys/dir_list.h"

namespace warren::isolation {
namespace {

EntryType TypeOf(mode_t m) {
  if (S_ISREG(m)) return EntryType::kFile;
  if (S_ISDIR(m)) return EntryType::kDir;
  if (S_ISLNK(m)) return EntryType::kSymlink;
  return EntryType::kOther;
}

// Relative form of an absolute path for *at calls ("." for the root).
std::string Rel(const std::string& p) { return p == "/" ? "." : p.substr(1); }

std::string Join(const std::string& dir, const std::string& name) {
  return (dir == "/" ? "" : dir) + "/" + name;
}

// A stat that does not follow a trailing symlink, beneath `dirfd` only: 0 or -1 with errno.
int StatBeneath(int dirfd, const std::string& rel, struct stat* st) {
  UniqueFd fd(OpenBeneath(dirfd, rel, O_PATH));
  if (!fd) return -1;
  return fstat(fd.get(), st);
}

bool Opaque(int dirfd, const std::string& rel) {
  UniqueFd fd(OpenBeneath(dirfd, rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK));
  if (!fd) return false;
  char v[4] = {};
  for (const char* name : {"user.overlay.opaque", "trusted.overlay.opaque"}) {
    ssize_t n = fgetxattr(fd.get(), name, v, sizeof v);
    if (n == 1 && v[0] == 'y') return true;
  }
  return false;
}

Result<std::vector<std::string>> List(int dirfd, const std::string& rel) {
  UniqueFd fd(OpenBeneath(dirfd, rel, O_RDONLY | O_DIRECTORY));
  if (!fd) return ErrnoStatus("open directory", rel);
  return sys::ListDir(fd.get(), ".");
}

class Reader {
 public:
  Reader(int upper, std::vector<int> layers, std::string under, size_t limit)
      : upper_(upper), layers_(std::move(layers)), under_(std::move(under)), limit_(limit) {}

  ChangeReport report;

  // The layer that shows `path` below the writable layer (-1: none does), and its stat. A
  // whiteout or an opaque directory in a layer hides the layers under it, as overlayfs does.
  int LowerOf(const std::string& path, struct stat* out) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      struct stat st;
      if (StatBeneath(layers_[i], Rel(path), &st) == 0) {
        if (IsWhiteout(st)) return -1;
        *out = st;
        return static_cast<int>(i);
      }
      // Absent here: does this layer hide the path from the ones below?
      for (std::string a = path; a != "/";) {
        a = a.substr(0, std::max<size_t>(a.rfind('/'), 1));
        if (StatBeneath(layers_[i], Rel(a), &st) != 0) continue;
        if (IsWhiteout(st) || !S_ISDIR(st.st_mode) || Opaque(layers_[i], Rel(a))) return -1;
      }
    }
    return -1;
  }

  // An entry of the writable layer that cannot be read (a path too long for one lookup): the
  // report is marked incomplete rather than silently missing it.
  void Unreadable() { report.truncated = true; }

  bool Full() {
    if (report.changes.size() < limit_) return false;
    report.truncated = true;
    return true;
  }

  void Add(const std::string& path, ChangeKind k, const struct stat& st, int layer) {
    if (!PathWithin(path, under_) || Full()) return;
    FsChange c;
    c.path = path;
    c.kind = k;
    c.type = TypeOf(st.st_mode);
    c.layer = layer;
    c.size = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
    c.mode = st.st_mode & 07777;
    report.changes.push_back(std::move(c));
  }

  // Everything at or below `path` in the writable layer is new.
  Status AddedTree(const std::string& path, const struct stat& st) {
    Add(path, ChangeKind::kAdded, st, -1);
    if (!S_ISDIR(st.st_mode) || report.truncated) return Status::Ok();
    for (const auto& name : WARREN_TRY(List(upper_, Rel(path)))) {
      const std::string child = Join(path, name);
      struct stat cst;
      if (StatBeneath(upper_, Rel(child), &cst) != 0) {
        Unreadable();
        continue;
      }
      WARREN_RETURN_IF_ERROR(AddedTree(child, cst));
    }
    return Status::Ok();
  }

  // The lower entries an opaque directory of the writable layer hides (deleted), except the
  // names it has itself.
  Status HiddenBy(const std::string& dir, const std::set<std::string>& own) {
    std::map<std::string, std::pair<int, struct stat>> seen;
    std::set<std::string> gone;
    for (size_t i = 0; i < layers_.size(); ++i) {
      struct stat dst;
      if (StatBeneath(layers_[i], Rel(dir), &dst) != 0) continue;
      if (!S_ISDIR(dst.st_mode)) break;
      for (const auto& name : WARREN_TRY(List(layers_[i], Rel(dir)))) {
        if (seen.count(name) || gone.count(name)) continue;
        struct stat st;
        if (StatBeneath(layers_[i], Rel(Join(dir, name)), &st) != 0) continue;
        if (IsWhiteout(st))
          gone.insert(name);
        else
          seen[name] = {static_cast<int>(i), st};
      }
      if (Opaque(layers_[i], Rel(dir))) break;
    }
    for (const auto& [name, v] : seen)
      if (!own.count(name)) Add(Join(dir, name), ChangeKind::kDeleted, v.second, v.first);
    return Status::Ok();
  }

  // `path` is a directory present in the writable layer and in a lower one.
  Status Dir(const std::string& path) {
    // Only directories on the way to `under`, or within it, matter.
    if (!PathWithin(path, under_) && !PathWithin(under_, path)) return Status::Ok();
    const auto names = WARREN_TRY(List(upper_, Rel(path)));
    if (Opaque(upper_, Rel(path)))
      WARREN_RETURN_IF_ERROR(HiddenBy(path, std::set<std::string>(names.begin(), names.end())));
    for (const auto& name : names) {
      if (report.truncated) break;
      const std::string child = Join(path, name);
      if (!PathWithin(child, under_) && !PathWithin(under_, child)) continue;
      struct stat st, lst;
      if (StatBeneath(upper_, Rel(child), &st) != 0) {
        Unreadable();
        continue;
      }
      const int lower = LowerOf(child, &lst);
      if (IsWhiteout(st)) {
        if (lower >= 0) Add(child, ChangeKind::kDeleted, lst, lower);
        continue;
      }
      if (lower < 0) {
        WARREN_RETURN_IF_ERROR(AddedTree(child, st));
        continue;
      }
      if (S_ISDIR(st.st_mode) && S_ISDIR(lst.st_mode)) {
        // A directory copied up only to hold changes below it is not a change itself; one
        // made anew over a deleted one (opaque: it hides what the layers had) is.
        if ((st.st_mode & 07777) != (lst.st_mode & 07777) || st.st_uid != lst.st_uid ||
            st.st_gid != lst.st_gid || Opaque(upper_, Rel(child)))
          Add(child, ChangeKind::kModified, st, lower);
        WARREN_RETURN_IF_ERROR(Dir(child));
        continue;
      }
      Add(child, ChangeKind::kModified, st, lower);
      // A directory that replaced a file: all it holds is new.
      if (S_ISDIR(st.st_mode))
        for (const auto& n : WARREN_TRY(List(upper_, Rel(child)))) {
          struct stat cst;
          if (StatBeneath(upper_, Rel(Join(child, n)), &cst) != 0)
            Unreadable();
          else
            WARREN_RETURN_IF_ERROR(AddedTree(Join(child, n), cst));
        }
    }
    return Status::Ok();
  }

  Status Shm(int shm_fd, const std::string& rel, const std::string& path) {
    for (const auto& name : WARREN_TRY(List(shm_fd, rel))) {
      if (report.truncated) break;
      const std::string r = rel == "." ? name : rel + "/" + name;
      struct stat st;
      if (StatBeneath(shm_fd, r, &st) != 0) {
        Unreadable();
        continue;
      }
      Add(Join(path, name), ChangeKind::kAdded, st, -1);
      if (S_ISDIR(st.st_mode)) WARREN_RETURN_IF_ERROR(Shm(shm_fd, r, Join(path, name)));
    }
    return Status::Ok();
  }

 private:
  int upper_;
  std::vector<int> layers_;
  std::string under_;
  size_t limit_;
};

}  // namespace

const char* ChangeKindName(ChangeKind k) {
  switch (k) {
    case ChangeKind::kAdded:
      return "added";
    case ChangeKind::kModified:
      return "modified";
    case ChangeKind::kDeleted:
      return "deleted";
  }
  return "?";
}

const char* EntryTypeName(EntryType t) {
  switch (t) {
    case EntryType::kFile:
      return "file";
    case EntryType::kDir:
      return "dir";
    case EntryType::kSymlink:
      return "symlink";
    case EntryType::kOther:
      return "other";
  }
  return "?";
}

Result<ChangeReport> ReadChanges(int upper_fd, int shm_fd, const std::vector<int>& layer_fds,
                                 const std::string& under, size_t limit) {
  Reader r(upper_fd, layer_fds, under, limit);
  WARREN_RETURN_IF_ERROR(r.Dir("/"));
  if (shm_fd >= 0 && (PathWithin("/dev/shm", under) || PathWithin(under, "/dev/shm")))
    WARREN_RETURN_IF_ERROR(r.Shm(shm_fd, ".", "/dev/shm"));
  std::sort(r.report.changes.begin(), r.report.changes.end(),
            [](const FsChange& a, const FsChange& b) { return a.path < b.path; });
  return std::move(r.report);
}

}  // namespace warren::isolation
