#include "image/tar_extract.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <vector>

namespace warren::image {
namespace {

using ReadPtr = std::unique_ptr<archive, decltype(&archive_read_free)>;
using WritePtr = std::unique_ptr<archive, decltype(&archive_write_free)>;

Status MkdirParents(const std::string& dest, const std::string& rel) {
  for (size_t i = rel.find('/'); i != std::string::npos; i = rel.find('/', i + 1)) {
    std::string p = dest + "/" + rel.substr(0, i);
    if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", p);
  }
  return Status::Ok();
}

// A layer's whiteouts in overlayfs form, so the layer can delete from the layers beneath it:
// `.wh.NAME` -> a 0/0 character device NAME; `.wh..wh..opq` -> the directory marked opaque
// (user.overlay.opaque for the sandboxes' userxattr overlay, trusted.overlay.opaque for an
// overlay mounted by a real root, as in a VM guest).
Status ApplyWhiteouts(const std::string& dest, const std::vector<std::string>& whiteouts,
                      const std::vector<std::string>& opaque_dirs) {
  for (const auto& w : whiteouts) {
    WARREN_RETURN_IF_ERROR(MkdirParents(dest, w));
    std::string p = dest + "/" + w;
    struct stat st;
    if (lstat(p.c_str(), &st) == 0) continue;  // the layer also has the entry: it wins
    if (mknod(p.c_str(), S_IFCHR | 0, makedev(0, 0)) != 0) return ErrnoStatus("mknod whiteout", p);
  }
  for (const auto& d : opaque_dirs) {
    std::string p = d.empty() ? dest : dest + "/" + d;
    if (!d.empty()) {
      WARREN_RETURN_IF_ERROR(MkdirParents(dest, d + "/x"));
    }
    for (const char* name : {"user.overlay.opaque", "trusted.overlay.opaque"})
      if (lsetxattr(p.c_str(), name, "y", 1, 0) != 0) return ErrnoStatus("mark opaque", p);
  }
  return Status::Ok();
}

}  // namespace

std::string CleanTarPath(const std::string& in, bool* bad) {
  std::string out, comp;
  *bad = false;
  size_t i = 0;
  while (i <= in.size()) {
    size_t j = in.find('/', i);
    if (j == std::string::npos) j = in.size();
    comp = in.substr(i, j - i);
    i = j + 1;
    if (comp.empty() || comp == ".") continue;
    if (comp == "..") {
      *bad = true;
      return "";
    }
    out += (out.empty() ? "" : "/") + comp;
  }
  return out;
}

Status ExtractTar(const std::string& tar_path, const std::string& dest_dir,
                  const ExtractLimits& limits) {
  char real[PATH_MAX];
  if (!realpath(dest_dir.c_str(), real)) return ErrnoStatus("realpath", dest_dir);
  const std::string dest = real;

  ReadPtr in(archive_read_new(), archive_read_free);
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  archive_read_support_filter_all(in.get());
  if (archive_read_open_filename(in.get(), tar_path.c_str(), 1 << 16) != ARCHIVE_OK)
    return Invalid(std::string("not a readable tar: ") + archive_error_string(in.get()), tar_path);

  WritePtr out(archive_write_disk_new(), archive_write_free);
  // SECURE_SYMLINKS: never write through a symlink (an earlier entry could plant one
  // pointing at a host path). NODOTDOT as a second line behind CleanPath.
  archive_write_disk_set_options(
      out.get(), ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                     ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                     ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_UNLINK);
  // Numeric ids only: the host's /etc/passwd has nothing to do with the image's.
  archive_write_disk_set_standard_lookup(out.get());

  archive_entry* e;
  std::vector<std::string> whiteouts, opaque_dirs;
  // Parents the archive never describes are made by the extraction, with the time of day:
  // they get a fixed time afterwards so the same archive always gives the same image.
  std::set<std::string> described, parents;
  size_t entries = 0;
  uint64_t bytes = 0;
  for (;;) {
    int r = archive_read_next_header(in.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN)
      return Invalid(std::string("bad tar entry: ") + archive_error_string(in.get()), tar_path);
    bool bad = false;
    std::string rel = CleanTarPath(archive_entry_pathname(e), &bad);
    if (bad)
      return Invalid("entry escapes the image root: " + std::string(archive_entry_pathname(e)),
                     tar_path);
    if (rel.empty()) continue;
    // OCI/AUFS whiteouts become overlayfs ones after extraction (see ApplyWhiteouts).
    if (std::string base = rel.substr(rel.rfind('/') + 1);
        limits.oci_whiteouts && base.rfind(".wh.", 0) == 0) {
      if (base == ".wh..wh..opq")
        opaque_dirs.push_back(rel.size() > base.size() ? rel.substr(0, rel.size() - base.size() - 1)
                                                       : "");
      else if (base.rfind(".wh..wh.", 0) != 0)
        whiteouts.push_back(rel.substr(0, rel.size() - base.size()) + base.substr(4));
      continue;
    }
    described.insert(rel);
    for (size_t i = rel.find('/'); i != std::string::npos; i = rel.find('/', i + 1))
      parents.insert(rel.substr(0, i));
    archive_entry_set_pathname(e, (dest + "/" + rel).c_str());
    // Keep ids numeric: clear names so the host's user database is never consulted.
    archive_entry_set_uname(e, nullptr);
    archive_entry_set_gname(e, nullptr);
    if (const char* hl = archive_entry_hardlink(e)) {
      std::string hrel = CleanTarPath(hl, &bad);
      if (bad || hrel.empty()) return Invalid("hard link escapes the image root", tar_path);
      archive_entry_set_hardlink(e, (dest + "/" + hrel).c_str());
    }
    r = archive_write_header(out.get(), e);
    if (r < ARCHIVE_WARN)
      return Invalid(
          std::string("cannot extract `") + rel + "`: " + archive_error_string(out.get()),
          tar_path);
    if (archive_entry_size(e) > 0) {
      const void* buf;
      size_t size;
      la_int64_t offset;
      while ((r = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
        bytes += size;
        if (bytes > limits.max_bytes)
          return Invalid("archive expands beyond " + std::to_string(limits.max_bytes) + " bytes",
                         tar_path);
        if (archive_write_data_block(out.get(), buf, size, offset) < ARCHIVE_WARN)
          return Internal("write", rel, archive_error_string(out.get()));
      }
      if (r != ARCHIVE_EOF)
        return Invalid(std::string("truncated tar data: ") + archive_error_string(in.get()),
                       tar_path);
    }
    if (archive_write_finish_entry(out.get()) < ARCHIVE_WARN)
      return Internal("finish entry", rel, archive_error_string(out.get()));
    if (++entries > limits.max_entries)
      return Invalid("archive has more than " + std::to_string(limits.max_entries) + " entries",
                     tar_path);
  }
  // Before close: closing restores the described directories' times, which the whiteout
  // nodes made inside them would otherwise change.
  WARREN_RETURN_IF_ERROR(ApplyWhiteouts(dest, whiteouts, opaque_dirs));
  if (archive_write_close(out.get()) != ARCHIVE_OK)
    return Internal("close extraction", dest, archive_error_string(out.get()));
  if (entries == 0 && whiteouts.empty() && opaque_dirs.empty())
    return Invalid("empty tar archive", tar_path);
  for (const auto& w : whiteouts)
    for (size_t i = w.find('/'); i != std::string::npos; i = w.find('/', i + 1))
      parents.insert(w.substr(0, i));
  for (const auto& d : opaque_dirs) {
    if (d.empty()) continue;
    parents.insert(d);
    for (size_t i = d.find('/'); i != std::string::npos; i = d.find('/', i + 1))
      parents.insert(d.substr(0, i));
  }
  const timespec zero[2] = {{0, 0}, {0, 0}};
  for (const auto& p : parents)
    if (!described.count(p))
      utimensat(AT_FDCWD, (dest + "/" + p).c_str(), zero, AT_SYMLINK_NOFOLLOW);
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  int rc = nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int type, FTW*) -> int {
        return type == FTW_DP ? rmdir(p) : unlink(p);
      },
      64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (rc != 0 && errno != ENOENT) return ErrnoStatus("remove tree", path);
  return Status::Ok();
}

}  // namespace warren::image
