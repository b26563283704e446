#include "image/oci_flatten.h"

#include <archive.h>
#include <archive_entry.h>

#include <map>
#include <memory>
#include <unordered_set>

#include "image/tar_extract.h"

namespace warren::image {
namespace {

using ReadPtr = std::unique_ptr<archive, decltype(&archive_read_free)>;
using WritePtr = std::unique_ptr<archive, decltype(&archive_write_free)>;

constexpr const char* kWhiteoutPrefix = ".wh.";
constexpr const char* kOpaqueMarker = ".wh..wh..opq";
// Bounds the path sets kept in memory (a layer is a filesystem, not a disk).
constexpr uint64_t kMaxEntries = 8'000'000;

Result<ReadPtr> OpenLayer(const std::string& path) {
  ReadPtr in(archive_read_new(), archive_read_free);
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  archive_read_support_filter_all(in.get());
  if (archive_read_open_filename(in.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
    return Invalid(std::string("layer is not a readable tar: ") + archive_error_string(in.get()),
                   path);
  return in;
}

// The next entry's header, or nullptr at the end of the layer.
Result<archive_entry*> NextEntry(archive* in, const std::string& path) {
  archive_entry* e = nullptr;
  int r = archive_read_next_header(in, &e);
  if (r == ARCHIVE_EOF) return static_cast<archive_entry*>(nullptr);
  if (r < ARCHIVE_WARN)
    return Invalid(std::string("bad tar entry: ") + archive_error_string(in), path);
  return e;
}

// What a whiteout entry means: the path it deletes, or (opaque) the directory it empties.
struct Whiteout {
  bool is_whiteout = false;
  bool opaque = false;
  std::string target;  // empty for other `.wh..wh.` metadata, which is dropped
};

Whiteout ParseWhiteout(const std::string& rel) {
  size_t slash = rel.rfind('/');
  std::string dir = slash == std::string::npos ? "" : rel.substr(0, slash);
  std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
  Whiteout w;
  if (base.rfind(kWhiteoutPrefix, 0) != 0) return w;
  w.is_whiteout = true;
  if (base == kOpaqueMarker) {
    w.opaque = true;
    w.target = dir;
  } else if (base.rfind(".wh..wh.", 0) != 0) {
    w.target = (dir.empty() ? "" : dir + "/") + base.substr(4);
  }
  return w;
}

// What the layers above the current one decided. A lower entry is hidden if an upper layer
// wrote or deleted the same path, replaced an ancestor with a non-directory, deleted an
// ancestor, or marked an ancestor opaque.
struct UpperView {
  std::unordered_set<std::string> taken;         // exact paths decided above
  std::unordered_set<std::string> hide_below;    // descendants of these are hidden
  std::unordered_set<std::string> implied_dirs;  // ancestors of upper entries (must stay dirs)

  bool Hidden(const std::string& p, bool is_dir) const {
    if (taken.count(p)) return true;
    if (!is_dir && implied_dirs.count(p)) return true;
    if (hide_below.count("")) return true;  // an opaque root
    for (size_t i = p.find('/'); i != std::string::npos; i = p.find('/', i + 1))
      if (hide_below.count(p.substr(0, i))) return true;
    return false;
  }
  void Merge(UpperView&& layer) {
    taken.merge(layer.taken);
    hide_below.merge(layer.hide_below);
    implied_dirs.merge(layer.implied_dirs);
  }
  void Wrote(const std::string& p, bool is_dir) {
    taken.insert(p);
    if (!is_dir) hide_below.insert(p);
    for (size_t i = p.find('/'); i != std::string::npos; i = p.find('/', i + 1))
      implied_dirs.insert(p.substr(0, i));
  }
};

// Pass 1 over a lower layer: hard links that stay visible while their target is hidden. The
// first such link becomes the carrier of the target's data. Returns target -> carrier.
Result<std::map<std::string, std::string>> PlanHardLinks(const std::string& path,
                                                         const UpperView& upper) {
  std::map<std::string, std::string> carrier;
  ReadPtr in = WARREN_TRY(OpenLayer(path));
  for (;;) {
    archive_entry* e = WARREN_TRY(NextEntry(in.get(), path));
    if (!e) break;
    const char* hl = archive_entry_hardlink(e);
    if (!hl) continue;
    bool bad = false;
    std::string rel = CleanTarPath(archive_entry_pathname(e), &bad);
    std::string target = CleanTarPath(hl, &bad);
    if (bad) return Invalid("entry escapes the image root", path);
    if (upper.Hidden(rel, false) || !upper.Hidden(target, false)) continue;
    carrier.emplace(target, rel);  // keeps the first
  }
  return carrier;
}

Status CopyData(archive* in, archive* out, const std::string& rel, uint64_t* bytes) {
  std::unique_ptr<char[]> buf(new char[1 << 16]);
  for (;;) {
    la_ssize_t n = archive_read_data(in, buf.get(), 1 << 16);
    if (n == 0) return Status::Ok();
    if (n < 0)
      return Invalid(std::string("truncated layer data: ") + archive_error_string(in), rel);
    if (archive_write_data(out, buf.get(), static_cast<size_t>(n)) < 0)
      return Internal("write tar data", rel, archive_error_string(out));
    *bytes += static_cast<uint64_t>(n);
  }
}

}  // namespace

Result<FlattenStats> FlattenLayers(const std::vector<std::string>& layers,
                                   const std::string& out_tar,
                                   const std::function<void(size_t)>& on_layer) {
  WritePtr out(archive_write_new(), archive_write_free);
  archive_write_set_format_pax_restricted(out.get());
  archive_write_set_bytes_per_block(out.get(), 64 * 1024);
  if (archive_write_open_filename(out.get(), out_tar.c_str()) != ARCHIVE_OK)
    return Internal("open tar for writing", out_tar, archive_error_string(out.get()));

  FlattenStats stats;
  UpperView upper;
  uint64_t seen = 0;
  // Directory entries are written after everything else: extracting a file into a directory
  // changes the directory's mtime, and the top-down order would otherwise write lower files
  // into a directory whose entry (and time) came before them. Same for missing parents.
  std::vector<std::unique_ptr<archive_entry, decltype(&archive_entry_free)>> dirs;
  for (size_t k = layers.size(); k-- > 0;) {
    const std::string& path = layers[k];
    if (on_layer) on_layer(k);
    std::map<std::string, std::string> carrier;
    if (!upper.taken.empty() || !upper.hide_below.empty())
      carrier = WARREN_TRY(PlanHardLinks(path, upper));

    UpperView mine;  // this layer's decisions apply to the layers below it, not to itself
    ReadPtr in = WARREN_TRY(OpenLayer(path));
    for (;;) {
      archive_entry* e = WARREN_TRY(NextEntry(in.get(), path));
      if (!e) break;
      if (++seen > kMaxEntries)
        return Invalid("image has more than " + std::to_string(kMaxEntries) + " entries", path);
      bool bad = false;
      std::string rel = CleanTarPath(archive_entry_pathname(e), &bad);
      if (bad)
        return Invalid("entry escapes the image root: " + std::string(archive_entry_pathname(e)),
                       path);
      if (rel.empty()) continue;  // the root's own entry: the sandbox root is made anew

      Whiteout w = ParseWhiteout(rel);
      if (w.is_whiteout) {
        if (w.opaque) {
          mine.hide_below.insert(w.target);
        } else if (!w.target.empty()) {
          mine.taken.insert(w.target);
          mine.hide_below.insert(w.target);
        }
        continue;
      }

      bool is_dir = archive_entry_filetype(e) == AE_IFDIR;
      std::string name = rel;
      if (const char* hl = archive_entry_hardlink(e)) {
        std::string target = CleanTarPath(hl, &bad);
        if (bad) return Invalid("hard link escapes the image root: " + rel, path);
        if (upper.Hidden(rel, false)) {
          ++stats.hidden;
          continue;
        }
        auto it = carrier.find(target);
        if (it != carrier.end()) {
          if (it->second == rel) continue;  // written already, as the carrier
          target = it->second;
        }
        archive_entry_set_hardlink(e, target.c_str());
      } else if (upper.Hidden(rel, is_dir)) {
        auto it = carrier.find(rel);
        if (it == carrier.end()) {
          ++stats.hidden;
          continue;
        }
        name = it->second;  // a replaced file that a visible hard link still needs
      }

      archive_entry_set_pathname(e, name.c_str());
      if (is_dir) {
        dirs.emplace_back(archive_entry_clone(e), archive_entry_free);
        mine.Wrote(name, true);
        ++stats.entries;
        continue;
      }
      if (archive_write_header(out.get(), e) < ARCHIVE_WARN)
        return Internal("write tar header", name, archive_error_string(out.get()));
      if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0 &&
          !archive_entry_hardlink(e))
        WARREN_RETURN_IF_ERROR(
            CopyData(in.get(), out.get(), name, &stats.bytes).Context("flatten " + path));
      mine.Wrote(name, is_dir);
      ++stats.entries;
    }
    upper.Merge(std::move(mine));
  }
  // Parents no layer described get a fixed entry, so the same image always gives the same tree.
  for (const auto& d : upper.implied_dirs) {
    if (d.empty() || upper.taken.count(d)) continue;
    std::unique_ptr<archive_entry, decltype(&archive_entry_free)> e(archive_entry_new(),
                                                                    archive_entry_free);
    archive_entry_set_pathname(e.get(), d.c_str());
    archive_entry_set_filetype(e.get(), AE_IFDIR);
    archive_entry_set_perm(e.get(), 0755);
    archive_entry_set_mtime(e.get(), 0, 0);
    dirs.push_back(std::move(e));
  }
  for (const auto& e : dirs) {
    if (archive_write_header(out.get(), e.get()) < ARCHIVE_WARN)
      return Internal("write tar header", archive_entry_pathname(e.get()),
                      archive_error_string(out.get()));
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK)
    return Internal("close tar", out_tar, archive_error_string(out.get()));
  return stats;
}

}  // namespace warren::image
