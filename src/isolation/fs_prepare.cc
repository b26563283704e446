#include "isolation/fs_prepare.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "base/cleanup.h"
#include "base/unique_fd.h"
#include "isolation/bind_pins.h"
#include "sys/dir_list.h"

namespace warren::isolation {
namespace {

std::string Parent(const std::string& p) {
  size_t i = p.rfind('/');
  return i == 0 ? "/" : p.substr(0, i);
}

// Resolves `path` as the kernel would from the sandbox's root, recording the directory of
// every symlink met on the way.
Result<std::string> Resolve(const std::string& path, std::set<std::string>* link_dirs) {
  std::vector<std::string> todo;  // components still to walk, last one first
  auto push = [&](const std::string& p) {
    std::vector<std::string> parts;
    size_t i = 0;
    while (i < p.size()) {
      size_t j = p.find('/', i);
      if (j == std::string::npos) j = p.size();
      if (j > i) parts.push_back(p.substr(i, j - i));
      i = j + 1;
    }
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  push(path);
  std::string cur = "/";
  int links = 0;
  while (!todo.empty()) {
    std::string c = todo.back();
    todo.pop_back();
    if (c == ".") continue;
    if (c == "..") {
      cur = Parent(cur);
      continue;
    }
    const std::string next = (cur == "/" ? "" : cur) + "/" + c;
    struct stat st;
    if (lstat(next.c_str(), &st) != 0) {
      if (errno == ENOENT)
        return Invalid("filesystem policy: `" + path + "` does not exist in the sandbox");
      return ErrnoStatus("stat", next);
    }
    if (S_ISLNK(st.st_mode)) {
      if (++links > 40) return Invalid("filesystem policy: too many symlinks in `" + path + "`");
      char buf[4096];
      ssize_t n = readlink(next.c_str(), buf, sizeof buf);
      if (n <= 0) return ErrnoStatus("readlink", next);
      link_dirs->insert(cur);
      std::string target(buf, static_cast<size_t>(n));
      if (target[0] == '/') cur = "/";
      push(target);
      continue;
    }
    cur = next;
  }
  return cur;
}

// Makes the overlay copy `path` (and the directories above it) into the writable layer by
// setting its mode to what it is. Other filesystems (/proc, /dev...) are left alone; a
// read-only mount (a guarded tool) needs nothing.
Status CopyUp(const std::string& path, dev_t root_dev) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path);
  if (st.st_dev != root_dev || S_ISLNK(st.st_mode)) return Status::Ok();
  // EROFS: a guarded tool's; EPERM: a file flagged immutable, so in the writable layer already.
  if (chmod(path.c_str(), st.st_mode & 07777) != 0 && errno != EROFS && errno != EPERM)
    return ErrnoStatus("copy up", path);
  return Status::Ok();
}

}  // namespace

Status CheckFsPolicy(const FsPolicy& req) {
  std::set<std::string> ignored;
  std::vector<std::string> ro, w;
  for (const auto& p : req.read_only) ro.push_back(WARREN_TRY(Resolve(p, &ignored)));
  for (const auto& p : req.writable) w.push_back(WARREN_TRY(Resolve(p, &ignored)));
  return NormalizeFsPolicy({ro, w}).status();
}

Result<FsPrepared> PrepareFsPolicy(const FsPolicy& req) {
  FsPrepared out;
  std::set<std::string> link_dirs;
  for (const auto& p : req.read_only) out.read_only.push_back(WARREN_TRY(Resolve(p, &link_dirs)));
  std::set<std::string> ignored;
  for (const auto& p : req.writable) out.writable.push_back(WARREN_TRY(Resolve(p, &ignored)));
  FsPolicy resolved{out.read_only, out.writable};
  resolved = WARREN_TRY(NormalizeFsPolicy(resolved));
  out.read_only = resolved.read_only;
  out.writable = resolved.writable;
  FsPolicyView view(resolved);
  struct stat root;
  if (stat("/", &root) != 0) return ErrnoStatus("stat", "/");
  for (const auto& p : out.read_only) {
    // Only the overlay can be guarded: a read-only tree that resolves onto another filesystem
    // (/dev/shm, /proc...) through a symlink would be accepted and not enforced. A read-only
    // mount (a guarded tool) is read-only already.
    struct stat st;
    struct statvfs vfs;
    if (lstat(p.c_str(), &st) != 0) return ErrnoStatus("stat", p);
    if (st.st_dev != root.st_dev && !(statvfs(p.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY)))
      return Invalid("filesystem policy: `" + p +
                     "` is not on the sandbox's root filesystem (a symlink to /dev/shm, "
                     "/proc or /sys?), which the policy cannot make read-only");
    WARREN_RETURN_IF_ERROR(CopyUp(p, root.st_dev));
  }
  for (const auto& p : out.writable) WARREN_RETURN_IF_ERROR(CopyUp(p, root.st_dev));
  for (const auto& d : link_dirs) {
    if (view.ReadOnly(d)) continue;  // flagged whole anyway
    out.fixed_dirs.push_back(d);
    WARREN_RETURN_IF_ERROR(CopyUp(d, root.st_dev));
    // Its directories stay writable: they must be in the writable layer before their parent
    // is fixed (a copy-up creates an entry there).
    for (const auto& name : WARREN_TRY(sys::ListDir(AT_FDCWD, d))) {
      const std::string sub = (d == "/" ? "" : d) + "/" + name;
      struct stat st;
      if (lstat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        WARREN_RETURN_IF_ERROR(CopyUp(sub, root.st_dev));
    }
  }
  // A read-only tree's own directory gets the flag (it cannot be renamed or removed then);
  // the directories above it, writable, are pinned.
  // So are the directories above each fixed directory: renaming one would take the symlink
  // along, and a new one could point elsewhere.
  std::set<std::string> pins;
  for (const auto& p : out.read_only)
    for (std::string a = Parent(p); p != "/" && a != "/"; a = Parent(a))
      if (!view.ReadOnly(a)) pins.insert(a);
  for (const auto& d : out.fixed_dirs)
    for (std::string a = d; a != "/"; a = Parent(a))
      if (!view.ReadOnly(a) && a != d) pins.insert(a);
  for (const auto& a : pins) WARREN_RETURN_IF_ERROR(PinInPlace(a));
  return out;
}

namespace {

Status CopyXattrs(int from, int to, const std::string& path) {
  char names[65536];
  ssize_t n = flistxattr(from, names, sizeof names);
  if (n < 0) return errno == ENOTSUP ? Status::Ok() : ErrnoStatus("list xattrs", path);
  for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(strlen(names + i)) + 1) {
    std::string value(65536, '\0');
    ssize_t v = fgetxattr(from, names + i, value.data(), value.size());
    if (v < 0) continue;  // one overlay keeps to itself
    if (fsetxattr(to, names + i, value.data(), static_cast<size_t>(v), 0) != 0)
      return ErrnoStatus(std::string("copy xattr ") + (names + i), path);
  }
  return Status::Ok();
}

}  // namespace

Status SeverFile(const std::string& path) {
  UniqueFd in(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!in) return ErrnoStatus("open", path);
  struct stat st;
  if (fstat(in.get(), &st) != 0) return ErrnoStatus("stat", path);
  if (!S_ISREG(st.st_mode)) return Status::Ok();
  const std::string tmp =
      Parent(path) + (Parent(path) == "/" ? "" : "/") + ".warren-sever." + std::to_string(getpid());
  unlink(tmp.c_str());
  UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out) return ErrnoStatus("create copy of", path);
  bool done = false;
  Cleanup rm([&] {
    if (!done) unlink(tmp.c_str());
  });
  off_t left = st.st_size;
  while (left > 0) {
    ssize_t n =
        sendfile(out.get(), in.get(), nullptr, static_cast<size_t>(std::min<off_t>(left, 1 << 30)));
    if (n < 0) return ErrnoStatus("copy", path);
    if (n == 0) break;  // shorter than it said: what there is, is the file
    left -= n;
  }
  WARREN_RETURN_IF_ERROR(CopyXattrs(in.get(), out.get(), path));
  if (fchown(out.get(), st.st_uid, st.st_gid) != 0) return ErrnoStatus("chown copy of", path);
  if (fchmod(out.get(), st.st_mode & 07777) != 0) return ErrnoStatus("chmod copy of", path);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  if (futimens(out.get(), times) != 0) return ErrnoStatus("set times of copy of", path);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename copy over", path);
  done = true;
  return Status::Ok();
}

}  // namespace warren::isolation
