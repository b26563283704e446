#include "image/layer_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/ids.h"
#include "base/sha256.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "image/tar_extract.h"

namespace warren::image {
namespace {

constexpr uint32_t kErofsMagic = 0xE0F5E1E2;
constexpr off_t kErofsSuperOffset = 1024;
// A fixed UUID keeps images reproducible: the same tree gives the same digest.
constexpr const char* kZeroUuid = "00000000-0000-0000-0000-000000000000";

Status MkdirP(const std::string& p) {
  std::string cur;
  for (size_t i = 0; i <= p.size(); ++i) {
    if (i == p.size() || (p[i] == '/' && i > 0)) {
      cur = p.substr(0, i);
      if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", cur);
    }
  }
  return Status::Ok();
}

bool ValidDigest(const std::string& d) {
  if (d.rfind("sha256:", 0) != 0 || d.size() != 7 + 64) return false;
  for (char c : d.substr(7))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

Status LayerStore::Init() {
  WARREN_RETURN_IF_ERROR(MkdirP(root_ + "/blobs/sha256"));
  return MkdirP(root_ + "/tmp");
}

std::string LayerStore::TempPath(const std::string& what) const {
  return root_ + "/tmp/" + what + "-" + RandomHex(8);
}

std::string LayerStore::BlobPath(const std::string& digest) const {
  if (!ValidDigest(digest)) return "";
  return root_ + "/blobs/sha256/" + digest.substr(7);
}

bool LayerStore::Has(const std::string& digest) const {
  std::string p = BlobPath(digest);
  return !p.empty() && access(p.c_str(), R_OK) == 0;
}

bool LayerStore::IsErofs(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  uint32_t magic = 0;
  return pread(fd.get(), &magic, sizeof magic, kErofsSuperOffset) == sizeof magic &&
         magic == kErofsMagic;
}

Result<BlobInfo> LayerStore::Commit(const std::string& tmp_file) {
  Cleanup rm([&] { unlink(tmp_file.c_str()); });
  std::string hex = WARREN_TRY(Sha256File(tmp_file));
  struct stat sb;
  if (stat(tmp_file.c_str(), &sb) != 0) return ErrnoStatus("stat", tmp_file);
  BlobInfo info{"sha256:" + hex, static_cast<uint64_t>(sb.st_size)};
  std::string dst = BlobPath(info.digest);
  // Blobs are immutable and readable only by root; identical content is stored once.
  chmod(tmp_file.c_str(), 0400);
  if (access(dst.c_str(), F_OK) != 0) {
    if (rename(tmp_file.c_str(), dst.c_str()) != 0) return ErrnoStatus("rename blob", dst);
    rm.Cancel();
  }
  return info;
}

Result<BlobInfo> LayerStore::ImportErofs(const std::string& path) {
  if (!IsErofs(path)) return Invalid("not an EROFS image (bad superblock magic)", path);
  return Commit(path);
}

Result<BlobInfo> LayerStore::ImportTar(const std::string& tar_path) {
  std::string dir = TempPath("unpack");
  if (mkdir(dir.c_str(), 0700) != 0) return ErrnoStatus("mkdir", dir);
  Cleanup rm_dir([&] { (void)RemoveTree(dir); });
  // The unpacked tree's root gets the conventional mode, whatever the umask.
  chmod(dir.c_str(), 0755);
  WARREN_RETURN_IF_ERROR(ExtractTar(tar_path, dir).Context("import tar"));
  // The root's own times come from the unpacking, not the archive: fix them so the same
  // archive always gives the same image (and digest).
  const timespec zero[2] = {{0, 0}, {0, 0}};
  utimensat(AT_FDCWD, dir.c_str(), zero, AT_SYMLINK_NOFOLLOW);
  std::string img = TempPath("erofs");
  Cleanup rm_img([&] { unlink(img.c_str()); });
  auto r = WARREN_TRY(RunProgram({"mkfs.erofs", "--quiet", "-x1", "-U", kZeroUuid, img, dir},
                                     {"SOURCE_DATE_EPOCH=0"}));
  if (r.exit_code != 0) return Internal("mkfs.erofs", img, "failed: " + r.output);
  rm_img.Cancel();
  return Commit(img);
}

Status LayerStore::Remove(const std::string& digest) {
  std::string p = BlobPath(digest);
  if (p.empty()) return Invalid("bad digest", digest);
  if (unlink(p.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink blob", p);
  return Status::Ok();
}

}  // namespace warren::image
