#include "image/blob_source.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "base/cleanup.h"
#include "base/ids.h"
#include "base/sha256.h"
#include "base/thread_annotations.h"
#include "base/unique_fd.h"
#include "sys/fd_io.h"

namespace warren::image {

Status BlobSource::StreamObject(ObjectKind kind, const std::string& sha256_hex, uint64_t max_bytes,
                                const std::function<bool(std::string_view)>& on_bytes) {
  std::string whole = WARREN_TRY(ReadObject(kind, sha256_hex, max_bytes));
  if (!whole.empty()) on_bytes(whole);
  return Status::Ok();
}

std::string ObjectRelPath(ObjectKind kind, const std::string& hex) {
  switch (kind) {
    case ObjectKind::kMeta:
      return "meta/sha256/" + hex;
    case ObjectKind::kMetaZstd:
      return "meta/sha256/" + hex + ".zst";
    case ObjectKind::kTrace:
      return "traces/sha256/" + hex;
    case ObjectKind::kPack:
      return "packs/sha256/" + hex;
    case ObjectKind::kChunk:
      break;
  }
  return "chunks/sha256/" + hex.substr(0, 2) + "/" + hex;
}

namespace {

const char* KindName(ObjectKind kind) {
  switch (kind) {
    case ObjectKind::kMeta:
      return "layer metadata";
    case ObjectKind::kMetaZstd:
      return "compressed layer metadata";
    case ObjectKind::kTrace:
      return "layer prefetch trace";
    case ObjectKind::kPack:
      return "layer prefetch pack";
    case ObjectKind::kChunk:
      break;
  }
  return "layer chunk";
}

// "sha256:<64 hex>" -> "<hex>", or "" when it is not a digest.
std::string HexOf(const std::string& digest) {
  if (digest.rfind("sha256:", 0) != 0 || digest.size() != 7 + 64) return "";
  const std::string hex = digest.substr(7);
  if (hex.find_first_not_of("0123456789abcdef") != std::string::npos) return "";
  return hex;
}

Status CopyFile(const std::string& from, const std::string& to) {
  UniqueFd in(open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return ErrnoStatus("open blob", from);
  struct stat st;
  if (fstat(in.get(), &st) != 0) return ErrnoStatus("stat blob", from);
  UniqueFd out(open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return ErrnoStatus("create", to);
  off_t off = 0;
  while (off < st.st_size) {
    // copy_file_range lets a shared filesystem copy server-side (NFS 4.2, CephFS).
    ssize_t n = copy_file_range(in.get(), &off, out.get(), nullptr,
                                static_cast<size_t>(st.st_size - off), 0);
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL))
      n = sendfile(out.get(), in.get(), &off, static_cast<size_t>(st.st_size - off));
    if (n < 0) return ErrnoStatus("copy blob", from);
    if (n == 0) return Internal("copy blob", from, "the file ended early");
  }
  if (fsync(out.get()) != 0) return ErrnoStatus("fsync", to);
  return Status::Ok();
}

class DirBlobSource : public BlobSource {
 public:
  explicit DirBlobSource(std::string root) : root_(std::move(root)) {}

  Status Fetch(const std::string& digest, const std::string& dest) override {
    const std::string hex = HexOf(digest);
    if (hex.empty()) return Invalid("fetch layer: not a digest", digest);
    const std::string path = root_ + "/blobs/sha256/" + hex;
    if (access(path.c_str(), F_OK) != 0) {
      if (errno == ENOENT) return NotFound("layer blob in the shared store", digest);
      return Status(Code::kUnavailable, "reach the shared layer store", root_, strerror(errno),
                    errno);
    }
    return CopyFile(path, dest);
  }

  Status Publish(const std::string& digest, const std::string& path) override {
    const std::string hex = HexOf(digest);
    if (hex.empty()) return Invalid("publish layer: not a digest", digest);
    const std::string dir = root_ + "/blobs/sha256";
    const std::string dst = dir + "/" + hex;
    if (access(dst.c_str(), F_OK) == 0) return Status::Ok();  // content-addressed: done
    for (const std::string& d : {root_ + "/blobs", dir})
      if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", d);
    // Written under a private name, then renamed: no node ever reads a partial blob.
    const std::string tmp = dir + "/." + hex + "." + RandomHex(6) + ".tmp";
    Cleanup rm([&] { unlink(tmp.c_str()); });
    WARREN_RETURN_IF_ERROR(CopyFile(path, tmp));
    chmod(tmp.c_str(), 0444);
    if (rename(tmp.c_str(), dst.c_str()) != 0) return ErrnoStatus("rename blob", dst);
    rm.Cancel();
    return Status::Ok();
  }

  Result<std::string> ReadObject(ObjectKind kind, const std::string& hex, uint64_t max) override {
    if (!IsSha256Hex(hex)) return Invalid("read layer object: not a sha256", hex);
    UniqueFd fd = WARREN_TRY(OpenObject(kind, hex, max));
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat", KindName(kind));
    std::string out(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = pread(fd.get(), out.data() + got, out.size() - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return Status(Code::kUnavailable, std::string("read ") + KindName(kind), hex,
                      strerror(errno), errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    out.resize(got);
    return out;
  }

  Status StreamObject(ObjectKind kind, const std::string& hex, uint64_t max,
                      const std::function<bool(std::string_view)>& on_bytes) override {
    if (!IsSha256Hex(hex)) return Invalid("read layer object: not a sha256", hex);
    UniqueFd fd = WARREN_TRY(OpenObject(kind, hex, max));
    std::string piece(256 << 10, '\0');
    for (;;) {
      const ssize_t n = read(fd.get(), piece.data(), piece.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return Status(Code::kUnavailable, std::string("read ") + KindName(kind), hex,
                      strerror(errno), errno);
      if (n == 0 || !on_bytes(std::string_view(piece.data(), static_cast<size_t>(n))))
        return Status::Ok();
    }
  }

  Status PublishBeside(ObjectKind kind, const std::string& hex, std::string_view bytes) override {
    if (kind != ObjectKind::kTrace && kind != ObjectKind::kPack)
      return Invalid("publish beside a layer: not a trace or pack", KindName(kind));
    if (!IsSha256Hex(hex)) return Invalid("publish " + std::string(KindName(kind)), hex);
    const std::string rel = ObjectRelPath(kind, hex);
    const std::string top = root_ + "/" + rel.substr(0, rel.find('/'));
    const std::string dir = root_ + "/" + rel.substr(0, rel.rfind('/'));
    for (const std::string& d : {top, dir})
      if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", d);
    const std::string tmp = dir + "/." + hex + "." + RandomHex(6) + ".tmp";
    Cleanup rm([&] { unlink(tmp.c_str()); });
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
    if (!fd || !sys::WriteFull(fd.get(), bytes))
      return ErrnoStatus(std::string("write ") + KindName(kind), tmp);
    if (rename(tmp.c_str(), (root_ + "/" + rel).c_str()) != 0)
      return ErrnoStatus(std::string("rename ") + KindName(kind), dir);
    rm.Cancel();
    return Status::Ok();
  }

  std::string Describe() const override { return root_; }

 private:
  // The object's file, opened, when it is at most `max` bytes.
  Result<UniqueFd> OpenObject(ObjectKind kind, const std::string& hex, uint64_t max) {
    const std::string path = root_ + "/" + ObjectRelPath(kind, hex);
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT)
        return NotFound(std::string(KindName(kind)) + " in the shared store", hex);
      return Status(Code::kUnavailable, "read the shared layer store", root_, strerror(errno),
                    errno);
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return ErrnoStatus("stat", path);
    if (static_cast<uint64_t>(st.st_size) > max)
      return Invalid(std::string("read ") + KindName(kind) + ": larger than the " +
                         std::to_string(max) + " bytes expected",
                     hex);
    return fd;
  }

  const std::string root_;
};

// GETs `url` into `write(…, data)`. A stalled transfer (under 1 KiB/s for 30 s) fails rather
// than holding a create or a read forever.
CURLcode Get(CURL* curl, const std::string& url, curl_write_callback write, void* data) {
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, data);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 30L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  return curl_easy_perform(curl);
}

class HttpBlobSource : public BlobSource {
 public:
  explicit HttpBlobSource(std::string base) : base_(std::move(base)) {
    while (!base_.empty() && base_.back() == '/') base_.pop_back();
  }

  Status Fetch(const std::string& digest, const std::string& dest) override {
    if (HexOf(digest).empty()) return Invalid("fetch layer: not a digest", digest);
    const std::string url = base_ + "/blobs/" + digest;
    UniqueFd out(open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out) return ErrnoStatus("create", dest);
    CURL* curl = curl_easy_init();
    if (!curl) return Internal("fetch layer", url, "curl_easy_init failed");
    Cleanup free_curl([&] { curl_easy_cleanup(curl); });
    struct Sink {
      int fd;
      bool failed = false;
    } sink{out.get()};
    auto write = +[](char* data, size_t size, size_t n, void* user) -> size_t {
      auto* s = static_cast<Sink*>(user);
      size_t left = size * n;
      while (left > 0) {
        ssize_t w = ::write(s->fd, data, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          s->failed = true;
          return 0;
        }
        data += w;
        left -= static_cast<size_t>(w);
      }
      return size * n;
    };
    const CURLcode rc = Get(curl, url, write, &sink);
    if (sink.failed) return ErrnoStatus("write", dest);
    if (rc != CURLE_OK)
      return Status(Code::kUnavailable, "fetch layer", url, curl_easy_strerror(rc));
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (code == 404) return NotFound("layer blob in the shared store", digest);
    if (code / 100 != 2)
      return Status(Code::kUnavailable, "fetch layer", url, "HTTP " + std::to_string(code));
    if (fsync(out.get()) != 0) return ErrnoStatus("fsync", dest);
    return Status::Ok();
  }

  Status Publish(const std::string& digest, const std::string&) override {
    // An HTTP store is read-only to Warren: whoever serves it fills it (for example nginx over
    // the directory API servers publish to).
    return Invalid(
        "publish layer: an HTTP layer store is read-only; give API servers the "
        "directory it serves",
        digest);
  }

  Result<std::string> ReadObject(ObjectKind kind, const std::string& hex, uint64_t max) override {
    std::string out;
    WARREN_RETURN_IF_ERROR(StreamObject(kind, hex, max, [&](std::string_view piece) {
      out.append(piece);
      return true;
    }));
    return out;
  }

  Status StreamObject(ObjectKind kind, const std::string& hex, uint64_t max,
                      const std::function<bool(std::string_view)>& on_bytes) override {
    if (!IsSha256Hex(hex)) return Invalid("read layer object: not a sha256", hex);
    const std::string url = base_ + "/" + ObjectRelPath(kind, hex);
    CURL* curl = TakeHandle();
    if (!curl) return Internal("read layer object", url, "curl_easy_init failed");
    Cleanup give_back([&] { GiveBack(curl); });
    struct Sink {
      CURL* curl;
      const std::function<bool(std::string_view)>& on_bytes;
      uint64_t max;
      uint64_t got = 0;
      bool too_big = false;
      bool stopped = false;
    } sink{curl, on_bytes, max};
    auto write = +[](char* data, size_t size, size_t n, void* user) -> size_t {
      auto* s = static_cast<Sink*>(user);
      const size_t len = size * n;
      long code = 0;
      curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
      if (code / 100 != 2) return len;  // an error page, not the object
      if (s->got + len > s->max) {
        s->too_big = true;
        return 0;
      }
      s->got += len;
      if (!s->on_bytes(std::string_view(data, len))) {
        s->stopped = true;
        return 0;
      }
      return len;
    };
    // A chunk is at most a few MiB: a minute is long enough for any store that works. A pack
    // is up to a few hundred chunks; a stalled one still fails within Get's 30 s.
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, kind == ObjectKind::kPack ? 600L : 60L);
    const CURLcode rc = Get(curl, url, write, &sink);
    if (sink.stopped) return Status::Ok();
    if (sink.too_big)
      return Invalid(std::string("read ") + KindName(kind) + ": larger than the " +
                         std::to_string(max) + " bytes expected",
                     hex);
    if (rc != CURLE_OK)
      return Status(Code::kUnavailable, std::string("read ") + KindName(kind), url,
                    curl_easy_strerror(rc));
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (code == 404) return NotFound(std::string(KindName(kind)) + " in the shared store", hex);
    if (code / 100 != 2)
      return Status(Code::kUnavailable, std::string("read ") + KindName(kind), url,
                    "HTTP " + std::to_string(code));
    return Status::Ok();
  }

  Status PublishBeside(ObjectKind kind, const std::string& hex, std::string_view) override {
    return Invalid(std::string("publish ") + KindName(kind) + ": an HTTP layer store is read-only",
                   hex);
  }

  std::string Describe() const override { return base_; }

  ~HttpBlobSource() override {
    for (CURL* c : idle_) curl_easy_cleanup(c);
  }

 private:
  // Handles are reused so that chunk reads keep their connections (one per concurrent reader).
  CURL* TakeHandle() {
    {
      MutexLock lock(&mu_);
      if (!idle_.empty()) {
        CURL* c = idle_.back();
        idle_.pop_back();
        curl_easy_reset(c);
        return c;
      }
    }
    return curl_easy_init();
  }
  void GiveBack(CURL* c) {
    MutexLock lock(&mu_);
    if (idle_.size() < 32) {
      idle_.push_back(c);
      return;
    }
    curl_easy_cleanup(c);
  }

  std::string base_;
  Mutex mu_;
  std::vector<CURL*> idle_ GUARDED_BY(mu_);
};

}  // namespace

Result<std::unique_ptr<BlobSource>> OpenBlobSource(const std::string& spec) {
  if (spec.rfind("http://", 0) == 0 || spec.rfind("https://", 0) == 0)
    return std::unique_ptr<BlobSource>(std::make_unique<HttpBlobSource>(spec));
  if (spec.empty() || spec[0] != '/')
    return Invalid("--layer-store wants an absolute directory or an http(s):// URL", spec);
  struct stat st;
  if (stat(spec.c_str(), &st) != 0) return ErrnoStatus("open the layer store", spec);
  if (!S_ISDIR(st.st_mode)) return Invalid("the layer store is not a directory", spec);
  return std::unique_ptr<BlobSource>(std::make_unique<DirBlobSource>(spec));
}

}  // namespace warren::image
