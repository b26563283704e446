#include "image/layer_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "base/cleanup.h"
#include "base/ids.h"
#include "base/sha256.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "image/tar_extract.h"
#include "image/zstd_codec.h"

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

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.push_back(e->d_name);
    closedir(d);
  }
  return names;
}

bool ValidDigest(const std::string& d) {
  if (d.rfind("sha256:", 0) != 0 || d.size() != 7 + 64) return false;
  for (char c : d.substr(7))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// CRC32C (Castagnoli), bitwise, as EROFS checksums its superblock (no final inversion).
uint32_t Crc32c(uint32_t crc, const unsigned char* p, size_t n) {
  while (n--) {
    crc ^= *p++;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0);
  }
  return crc;
}

// mkfs.erofs (1.5) can either keep every file's mtime or be reproducible (SOURCE_DATE_EPOCH
// flattens all times), not both: the superblock's build time is "now". Files keep their
// mtimes (stale-looking times break Python's .pyc checks and make), and we zero the build time
// afterwards and re-checksum the superblock, so the same tree still gives the same digest.
Status ZeroBuildTime(const std::string& img) {
  UniqueFd fd(open(img.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", img);
  unsigned char sb[4096];
  if (pread(fd.get(), sb, sizeof sb, 0) != static_cast<ssize_t>(sizeof sb))
    return ErrnoStatus("read superblock", img);
  unsigned char* s = sb + kErofsSuperOffset;
  uint32_t magic, compat;
  memcpy(&magic, s, 4);
  memcpy(&compat, s + 8, 4);
  if (magic != kErofsMagic) return Internal("fix superblock", img, "not EROFS");
  const unsigned blkszbits = s[12];
  if (blkszbits != 12) return Internal("fix superblock", img, "unexpected block size");
  memset(s + 24, 0, 12);  // build_time (u64) and build_time_nsec (u32)
  if (compat & 1) {       // EROFS_FEATURE_COMPAT_SB_CHKSUM
    memset(s + 4, 0, 4);
    uint32_t crc = Crc32c(~0u, s, sizeof sb - kErofsSuperOffset);
    memcpy(s + 4, &crc, 4);
  }
  if (pwrite(fd.get(), sb, sizeof sb, 0) != static_cast<ssize_t>(sizeof sb))
    return ErrnoStatus("write superblock", img);
  return Status::Ok();
}

}  // namespace

Status LayerStore::Init() {
  WARREN_RETURN_IF_ERROR(MkdirP(root_ + "/blobs/sha256"));
  WARREN_RETURN_IF_ERROR(MkdirP(root_ + "/meta/sha256"));
  WARREN_RETURN_IF_ERROR(MkdirP(root_ + "/chunks/sha256"));
  return MkdirP(root_ + "/tmp");
}

std::string LayerStore::ObjectPath(ObjectKind kind, const std::string& hex) const {
  return root_ + "/" + ObjectRelPath(kind, hex);
}

std::string LayerStore::MetaPath(const std::string& hex) const {
  return ObjectPath(ObjectKind::kMeta, hex);
}

std::string LayerStore::ChunkPath(const std::string& hex) const {
  return ObjectPath(ObjectKind::kChunk, hex);
}

std::string LayerStore::TracePath(const std::string& hex) const {
  return ObjectPath(ObjectKind::kTrace, hex);
}

std::string LayerStore::PromotedPath(const std::string& digest) const {
  if (!ValidDigest(digest)) return "";
  return root_ + "/promoted/sha256/" + digest.substr(7);
}

bool LayerStore::IsPromoted(const std::string& digest) const {
  const std::string p = PromotedPath(digest);
  return !p.empty() && access(p.c_str(), R_OK) == 0;
}

Status LayerStore::Promote(const std::string& digest) {
  if (IsPromoted(digest)) return Status::Ok();
  std::shared_ptr<const ChunkedLayer> mp = WARREN_TRY(Manifest(digest));
  const ChunkedLayer& m = *mp;
  // Cheap first: stop at the first chunk not here (the usual answer).
  for (const auto& c : m.chunks)
    if (access(ChunkPath(c.sha256).c_str(), R_OK) != 0)
      return NotFound("layer chunk on this node", c.sha256);
  WARREN_RETURN_IF_ERROR(MkdirP(root_ + "/promoted/sha256"));
  const std::string tmp = TempPath("promote");
  Cleanup rm([&] { unlink(tmp.c_str()); });
  UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
  if (!out) return ErrnoStatus("create", tmp);
  // Gaps between chunks stay holes: they read as zeros, as in the blob.
  if (ftruncate(out.get(), static_cast<off_t>(m.blob_size)) != 0) return ErrnoStatus("size", tmp);
  std::string bytes;
  for (const auto& c : m.chunks) {
    const std::string path = ChunkPath(c.sha256);
    UniqueFd in(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in) return ErrnoStatus("open layer chunk", c.sha256);  // evicted meanwhile
    bytes.resize(c.length);
    if (pread(in.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()) ||
        Sha256Hex(bytes) != c.sha256)
      return Internal("promote layer", digest, "cached chunk " + c.sha256 + " is not what it says");
    if (pwrite(out.get(), bytes.data(), bytes.size(), static_cast<off_t>(c.offset)) !=
        static_cast<ssize_t>(bytes.size()))
      return ErrnoStatus("write", tmp);
  }
  if (fsync(out.get()) != 0) return ErrnoStatus("fsync", tmp);
  if (rename(tmp.c_str(), PromotedPath(digest).c_str()) != 0)
    return ErrnoStatus("rename", PromotedPath(digest));
  rm.Cancel();
  return Status::Ok();
}

bool LayerStore::IsChunked(const std::string& digest) const {
  const std::string p = BlobPath(digest);
  return !p.empty() && IsManifestFile(p);
}

Result<std::shared_ptr<const ChunkedLayer>> LayerStore::Manifest(const std::string& digest) const {
  const std::string p = BlobPath(digest);
  if (p.empty()) return Invalid("bad digest", digest);
  {
    MutexLock lock(&manifest_mu_);
    if (auto it = manifests_.find(digest); it != manifests_.end()) return it->second;
  }
  if (!IsManifestFile(p)) return Invalid("layer is not chunked", digest);
  auto m = std::make_shared<const ChunkedLayer>(WARREN_TRY(ReadManifestFile(p)));
  MutexLock lock(&manifest_mu_);
  // A node uses a few layers at a time: a small bound, dropped whole when passed.
  if (manifests_.size() >= 64) manifests_.clear();
  manifests_[digest] = m;
  return m;
}

Status LayerStore::PutObject(ObjectKind kind, const std::string& hex, std::string_view bytes) {
  const std::string dst = ObjectPath(kind, hex);
  // Present: content-addressed, so done; its new mtime keeps a running collection off it.
  if (kind != ObjectKind::kTrace && utimensat(AT_FDCWD, dst.c_str(), nullptr, 0) == 0)
    return Status::Ok();
  WARREN_RETURN_IF_ERROR(MkdirP(dst.substr(0, dst.rfind('/'))));
  const std::string tmp = TempPath("object");
  Cleanup rm([&] { unlink(tmp.c_str()); });
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  if (!fd) return ErrnoStatus("create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write layer chunk", tmp);
    done += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) != 0) return ErrnoStatus("fsync", tmp);
  if (rename(tmp.c_str(), dst.c_str()) != 0) return ErrnoStatus("rename layer chunk", dst);
  rm.Cancel();
  return Status::Ok();
}

size_t LayerStore::CollectChunks(double grace_s) {
  std::set<std::string> metas, chunks, layers;
  for (const auto& d : ListDigests()) {
    if (!IsChunked(d)) continue;
    layers.insert(d.substr(7));
    auto m = Manifest(d);
    if (!m.ok()) {
      // A manifest this version cannot read keeps everything: nothing is collected.
      spdlog::warn("collect layer chunks: {}; keeping every chunk", m.status().ToString());
      return 0;
    }
    metas.insert((*m)->meta_sha256);
    metas.insert((*m)->meta_sha256 + ".zst");
    for (const auto& c : (*m)->chunks) chunks.insert(c.sha256);
  }
  const double now = static_cast<double>(time(nullptr));
  size_t removed = 0;
  auto sweep = [&](const std::string& dir, const std::set<std::string>& keep) {
    for (const auto& name : ListDir(dir)) {
      const std::string p = dir + "/" + name;
      struct stat st;
      if (keep.count(name) || lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (now - static_cast<double>(st.st_mtime) < grace_s) continue;
      if (unlink(p.c_str()) == 0) ++removed;
    }
  };
  sweep(root_ + "/meta/sha256", metas);
  sweep(root_ + "/traces/sha256", layers);
  sweep(root_ + "/packs/sha256", layers);
  for (const auto& sub : ListDir(root_ + "/chunks/sha256"))
    sweep(root_ + "/chunks/sha256/" + sub, chunks);
  if (removed) spdlog::info("layer store: removed {} unreferenced chunks", removed);
  return removed;
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

std::vector<std::string> LayerStore::ListDigests() const {
  std::vector<std::string> out;
  std::string dir = root_ + "/blobs/sha256";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (ValidDigest(std::string("sha256:") + e->d_name))
        out.push_back(std::string("sha256:") + e->d_name);
    closedir(d);
  }
  return out;
}

void LayerStore::ClearTemp() const {
  std::string dir = root_ + "/tmp";
  // A snapshot's scratch tmpfs (node/snapshot_builder.cc) left by a crash: unmounted first.
  for (const auto& n : ListDir(dir)) {
    (void)umount2((dir + "/" + n).c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    (void)RemoveTree(dir + "/" + n);
  }
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
  return ImportTree(dir, format_);
}

Result<BlobInfo> LayerStore::ImportTree(const std::string& dir, LayerFormat format) {
  if (format == LayerFormat::kChunked) return ImportTreeChunked(dir);
  std::string img = TempPath("erofs");
  Cleanup rm_img([&] { unlink(img.c_str()); });
  auto r = WARREN_TRY(
      RunProgram({"mkfs.erofs", "--quiet", "-x1", "--preserve-mtime", "-U", kZeroUuid, img, dir}));
  if (r.exit_code != 0) return Internal("mkfs.erofs", img, "failed: " + r.output);
  WARREN_RETURN_IF_ERROR(ZeroBuildTime(img));
  rm_img.Cancel();
  return Commit(img);
}

Status LayerStore::PublishToSource(const std::string& digest) {
  if (source_ == nullptr) return Status::Ok();
  if (IsChunked(digest)) return Invalid("only whole layers are published from a node", digest);
  return source_->Publish(digest, BlobPath(digest)).Context("publish layer " + digest);
}

Result<BlobInfo> LayerStore::ImportTreeChunked(const std::string& tree) {
  const std::string meta = TempPath("meta"), blob = TempPath("blob");
  Cleanup rm([&] {
    unlink(meta.c_str());
    unlink(blob.c_str());
  });
  auto r = WARREN_TRY(RunProgram({"mkfs.erofs", "--quiet", "-x1", "--preserve-mtime", "-U",
                                  kZeroUuid, "--chunksize=" + std::to_string(kLayerChunkSize),
                                  "--blobdev=" + blob, meta, tree}));
  if (r.exit_code != 0) return Internal("mkfs.erofs", meta, "failed: " + r.output);
  WARREN_RETURN_IF_ERROR(ZeroBuildTime(meta));
  ChunkedLayer layer =
      WARREN_TRY(SplitBlob(meta, blob, [this](const std::string& hex, std::string_view bytes) {
        return PutObject(ObjectKind::kChunk, hex, bytes);
      }));
  {
    std::string bytes;
    UniqueFd fd(open(meta.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return ErrnoStatus("open", meta);
    bytes.resize(layer.meta_size);
    if (pread(fd.get(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
      return ErrnoStatus("read", meta);
    WARREN_RETURN_IF_ERROR(PutObject(ObjectKind::kMeta, layer.meta_sha256, bytes));
    // Nodes fetch it compressed: 7x smaller, and it comes before a cold layer's first mount.
    const std::string packed = ZstdCompress(bytes);
    if (!packed.empty() && packed.size() < bytes.size()) {
      WARREN_RETURN_IF_ERROR(PutObject(ObjectKind::kMetaZstd, layer.meta_sha256, packed));
      // The copy stored first is kept (another zstd may have packed it to another size).
      struct stat st;
      const std::string stored = ObjectPath(ObjectKind::kMetaZstd, layer.meta_sha256);
      if (stat(stored.c_str(), &st) != 0) return ErrnoStatus("stat", stored);
      layer.meta_zstd_size = static_cast<uint64_t>(st.st_size);
    }
  }
  // The manifest last: a layer is only visible once every part of it is stored.
  const std::string manifest = TempPath("manifest");
  Cleanup rm_manifest([&] { unlink(manifest.c_str()); });
  {
    const std::string text = EncodeManifest(layer);
    UniqueFd fd(open(manifest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd || write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        fsync(fd.get()) != 0)
      return ErrnoStatus("write layer manifest", manifest);
  }
  BlobInfo info = WARREN_TRY(Commit(manifest));
  info.size = layer.meta_size + layer.ChunkBytes();
  info.chunked = true;
  return info;
}

namespace {
double MonotonicNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}
}  // namespace

void LayerStore::SetCacheLimit(uint64_t bytes, double min_age_s) {
  MutexLock lock(&fetch_mu_);
  cache_limit_ = bytes;
  cache_min_age_s_ = min_age_s;
}

void LayerStore::NoteUse(const std::string& digest) {
  MutexLock lock(&fetch_mu_);
  if (cache_limit_ > 0) last_used_[digest] = MonotonicNow();
}

uint64_t LayerStore::CachedBytes() const {
  uint64_t total = 0;
  for (const auto& d : ListDigests()) {
    struct stat st;
    if (stat(BlobPath(d).c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

void LayerStore::Trim(const std::string& keep) {
  struct Held {
    double used;
    std::string digest;
    uint64_t size;
  };
  std::vector<Held> held;
  uint64_t total = 0;
  const double now = MonotonicNow();
  const double wall = static_cast<double>(time(nullptr));
  MutexLock lock(&fetch_mu_);
  if (cache_limit_ == 0) return;
  for (const auto& d : ListDigests()) {
    struct stat st;
    if (stat(BlobPath(d).c_str(), &st) != 0) continue;
    total += static_cast<uint64_t>(st.st_size);
    auto it = last_used_.find(d);
    // Not ensured since this process started: as old as its file.
    const double used =
        it != last_used_.end() ? it->second : now - (wall - static_cast<double>(st.st_mtime));
    held.push_back({used, d, static_cast<uint64_t>(st.st_size)});
  }
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) { return a.used < b.used; });
  for (const Held& h : held) {
    if (total <= cache_limit_) break;
    if (h.digest == keep || fetching_.count(h.digest) || now - h.used < cache_min_age_s_) continue;
    if (!Remove(h.digest).ok()) continue;
    total -= h.size;
    last_used_.erase(h.digest);
    spdlog::info("layer cache: removed {} ({} MB, unused for {:.0f} s) to stay within {} MB",
                 h.digest, h.size >> 20, now - h.used, cache_limit_ >> 20);
  }
}

Status LayerStore::EnsureMeta(const std::string& digest,
                              const std::function<void()>& before_fetch) {
  std::shared_ptr<const ChunkedLayer> mp = WARREN_TRY(Manifest(digest));
  const ChunkedLayer& m = *mp;
  if (access(MetaPath(m.meta_sha256).c_str(), R_OK) == 0) return Status::Ok();
  if (!source_) return NotFound("layer metadata", m.meta_sha256);
  if (before_fetch) before_fetch();
  std::string bytes;
  if (m.meta_zstd_size) {
    const std::string packed =
        WARREN_TRY(source_->ReadObject(ObjectKind::kMetaZstd, m.meta_sha256, m.meta_zstd_size));
    auto unpacked = ZstdDecompress(packed, m.meta_size, "metadata of layer " + digest);
    if (!unpacked.ok())
      return Internal(
          "fetch layer metadata", digest,
          "the shared store's compressed metadata is corrupt: " + unpacked.status().message());
    bytes = std::move(*unpacked);
  } else {
    bytes = WARREN_TRY(source_->ReadObject(ObjectKind::kMeta, m.meta_sha256, m.meta_size));
  }
  // The store is trusted to be reachable, not to be right.
  if (bytes.size() != m.meta_size || Sha256Hex(bytes) != m.meta_sha256)
    return Internal("fetch layer metadata", digest,
                    "the shared store's metadata image does not match its digest");
  return PutObject(ObjectKind::kMeta, m.meta_sha256, bytes);
}

Status LayerStore::Ensure(const std::string& digest, const std::function<void()>& before_meta) {
  WARREN_RETURN_IF_ERROR(EnsureBlob(digest));
  if (IsChunked(digest)) return EnsureMeta(digest, before_meta).Context("fetch layer");
  return Status::Ok();
}

Status LayerStore::EnsureBlob(const std::string& digest) {
  if (BlobPath(digest).empty()) return Invalid("bad digest", digest);
  NoteUse(digest);
  if (Has(digest)) return Status::Ok();
  if (!source_) return NotFound("layer blob", digest);
  {
    // One fetch per blob: later askers wait for the first one's outcome.
    MutexLock lock(&fetch_mu_);
    while (fetching_.count(digest)) fetched_.wait(fetch_mu_);
    if (Has(digest)) return Status::Ok();
    fetching_.insert(digest);
  }
  Status st = Fetch(digest);
  {
    MutexLock lock(&fetch_mu_);
    fetching_.erase(digest);
  }
  fetched_.notify_all();
  if (st.ok()) Trim(digest);
  return st;
}

Status LayerStore::Fetch(const std::string& digest) {
  const std::string tmp = TempPath("fetch");
  Cleanup rm([&] { unlink(tmp.c_str()); });
  WARREN_RETURN_IF_ERROR(source_->Fetch(digest, tmp).Context("fetch layer"));
  // The shared store is trusted to be reachable, not to be right: a blob is what its digest
  // says or it is not used.
  if (!IsErofs(tmp) && !IsManifestFile(tmp))
    return Internal("fetch layer", digest,
                    "the shared store's blob is neither an EROFS image nor a layer manifest");
  auto info = WARREN_TRY(Commit(tmp));
  rm.Cancel();  // Commit moved or removed it
  if (info.digest != digest) {
    (void)Remove(info.digest);
    return Internal("fetch layer", digest,
                    "the shared store's blob has digest " + info.digest + " (corrupt or replaced)");
  }
  return Status::Ok();
}

Status LayerStore::Remove(const std::string& digest) {
  std::string p = BlobPath(digest);
  if (p.empty()) return Invalid("bad digest", digest);
  // A chunked layer's metadata image goes with it (its chunks go with CollectChunks: other
  // layers may share them). Another layer naming the same metadata fetches it again.
  if (IsChunked(digest)) {
    if (auto m = Manifest(digest); m.ok()) {
      unlink(MetaPath((*m)->meta_sha256).c_str());
      unlink(ObjectPath(ObjectKind::kMetaZstd, (*m)->meta_sha256).c_str());
    }
    unlink(PromotedPath(digest).c_str());
    MutexLock lock(&manifest_mu_);
    manifests_.erase(digest);
  }
  if (unlink(p.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink blob", p);
  return Status::Ok();
}

}  // namespace warren::image
