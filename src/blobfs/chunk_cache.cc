#include "blobfs/chunk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/ids.h"
#include "base/sha256.h"
#include "base/unique_fd.h"
#include "image/blob_source.h"

namespace warren::blobfs {
namespace {

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

bool PreadAll(int fd, char* out, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, out + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

ChunkCache::ChunkCache(std::string store_root, uint64_t high, uint64_t low)
    : root_(std::move(store_root)) {
  counters_.high = high;
  counters_.low = std::min(low, high);
  // Chunks waiting in memory count against the bound: at most a quarter of it waits, so
  // evicting what is on disk can always bring the whole back under the high watermark.
  pending_limit_ = high == 0 ? kMaxPendingBytes : std::min(kMaxPendingBytes, high / 4);
  writer_ = std::thread([this] { WriterLoop(); });
}

ChunkCache::~ChunkCache() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();  // after the queue is drained
}

std::string ChunkCache::PathOf(const std::string& hex) const {
  return root_ + "/" + image::ObjectRelPath(image::ObjectKind::kChunk, hex);
}

Status ChunkCache::Load() {
  struct Found {
    std::string hex;
    uint64_t size;
    time_t mtime;
  };
  std::vector<Found> found;
  const std::string base = root_ + "/chunks/sha256";
  if (mkdir((root_ + "/chunks").c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", root_ + "/chunks");
  if (mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", base);
  for (const auto& sub : Names(base))
    for (const auto& name : Names(base + "/" + sub)) {
      const std::string p = base + "/" + sub + "/" + name;
      struct stat st;
      if (lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (!IsSha256Hex(name) || name.compare(0, 2, sub) != 0) {
        unlink(p.c_str());  // a scratch file a crash left, or not ours
        continue;
      }
      found.push_back({name, static_cast<uint64_t>(st.st_size), st.st_mtime});
    }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  MutexLock lock(&mu_);
  for (auto& f : found) {
    lru_.push_back(f.hex);
    entries_[f.hex] = Entry{f.size, false, std::prev(lru_.end())};
    counters_.bytes += f.size;
  }
  counters_.chunks = entries_.size();
  EvictLocked();
  return Status::Ok();
}

void ChunkCache::Touch(Entry& e, const std::string& hex) {
  lru_.erase(e.lru);
  lru_.push_back(hex);
  e.lru = std::prev(lru_.end());
}

void ChunkCache::Drop(const std::string& hex) {
  auto it = entries_.find(hex);
  if (it == entries_.end()) return;
  counters_.bytes -= it->second.size;
  lru_.erase(it->second.lru);
  entries_.erase(it);
  counters_.chunks = entries_.size();
  unlink(PathOf(hex).c_str());
}

bool ChunkCache::VerifyFile(const std::string& hex, uint64_t length) {
  auto digest = Sha256File(PathOf(hex));
  struct stat st;
  return digest.ok() && *digest == hex && stat(PathOf(hex).c_str(), &st) == 0 &&
         static_cast<uint64_t>(st.st_size) == length;
}

bool ChunkCache::Read(const std::string& hex, uint64_t length, uint64_t off, size_t n, char* out) {
  bool verified = true;
  std::shared_ptr<const std::string> waiting;
  {
    MutexLock lock(&mu_);
    if (auto p = pending_.find(hex); p != pending_.end()) {
      waiting = p->second;
    } else {
      auto it = entries_.find(hex);
      if (it == entries_.end()) return false;
      Touch(it->second, hex);
      verified = it->second.verified;
    }
  }
  if (waiting) {
    if (off > waiting->size() || n > waiting->size() - off) return false;
    memcpy(out, waiting->data() + off, n);
    return true;
  }
  if (!verified) {
    // Found on disk at start: it may be a write a crash cut short. Checked once.
    const bool good = VerifyFile(hex, length);
    MutexLock lock(&mu_);
    auto it = entries_.find(hex);
    if (it == entries_.end()) return false;
    if (!good) {
      spdlog::warn("chunk cache: {} failed verification; removed", hex);
      ++counters_.corrupt;
      Drop(hex);
      return false;
    }
    it->second.verified = true;
  }
  UniqueFd fd(open(PathOf(hex).c_str(), O_RDONLY | O_CLOEXEC));
  // Evicted since the lookup: a miss, fetched again.
  if (!fd) return false;
  return PreadAll(fd.get(), out, n, off);
}

void ChunkCache::Insert(const std::string& hex, std::string_view bytes) {
  Insert(hex, std::make_shared<const std::string>(bytes));
}

void ChunkCache::Insert(const std::string& hex, std::shared_ptr<const std::string> bytes) {
  {
    MutexLock lock(&mu_);
    if (entries_.count(hex) || pending_.count(hex)) return;
    if (pending_bytes_ + bytes->size() <= pending_limit_) {
      pending_bytes_ += bytes->size();
      pending_[hex] = bytes;
      queue_.push_back(hex);
      cv_.notify_all();
      EvictLocked();  // what waits counts: room is made on disk now
      return;
    }
  }
  Write(hex, *bytes, false);  // the writer is that far behind: this thread waits its turn
}

void ChunkCache::WriterLoop() {
  // At the daemon's priority, not below: it evicts under the cache's lock, which every read
  // takes (a nice 19 writer on a busy node would hold the readers behind it).
  for (;;) {
    std::string hex;
    std::shared_ptr<const std::string> bytes;
    {
      MutexLock lock(&mu_);
      while (!stop_ && queue_.empty()) lock.Wait(cv_);
      if (queue_.empty()) return;  // stopping, and nothing is left to write
      hex = std::move(queue_.front());
      queue_.pop_front();
      bytes = pending_[hex];  // stays there (readers are served from it) until written
    }
    Write(hex, *bytes, true);
  }
}

void ChunkCache::Flush() {
  MutexLock lock(&mu_);
  while (!pending_.empty()) lock.Wait(cv_);
}

bool ChunkCache::Has(const std::string& hex) {
  MutexLock lock(&mu_);
  return entries_.count(hex) > 0 || pending_.count(hex) > 0;
}

void ChunkCache::Write(const std::string& hex, const std::string& bytes, bool pending) {
  const std::string dst = PathOf(hex);
  const std::string dir = dst.substr(0, dst.rfind('/'));
  const std::string tmp = dir + "/." + hex + "." + RandomHex(4);
  bool ok = (mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST);
  if (ok) {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400));
    ok = static_cast<bool>(fd);
    size_t done = 0;
    while (ok && done < bytes.size()) {
      ssize_t n = write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) done += static_cast<size_t>(n);
    }
    ok = ok && rename(tmp.c_str(), dst.c_str()) == 0;
    if (!ok) unlink(tmp.c_str());
  }
  const int err = ok ? 0 : errno;
  MutexLock lock(&mu_);
  if (pending) {
    // In the same step as it is indexed: a reader finds it in one place or the other.
    pending_.erase(hex);
    pending_bytes_ -= bytes.size();
    cv_.notify_all();
  }
  if (!ok) {
    // The disk is full or failing: the chunk is dropped (its next read fetches it again).
    if (counters_.write_errors++ == 0)
      spdlog::warn("chunk cache: cannot write {}: {}", dst, strerror(err));
    return;
  }
  if (entries_.count(hex)) return;
  lru_.push_back(hex);
  entries_[hex] = Entry{bytes.size(), true, std::prev(lru_.end())};
  counters_.bytes += bytes.size();
  counters_.chunks = entries_.size();
  EvictLocked();
}

void ChunkCache::EvictLocked() {
  // The bound holds what is on disk and what waits to be written (a user's cache size is what
  // the node spends on chunks); only chunks on disk are evicted.
  if (counters_.high == 0 || counters_.bytes + pending_bytes_ <= counters_.high) return;
  // A reader holding a chunk open keeps reading it after the unlink; the next read misses.
  while (counters_.bytes + pending_bytes_ > counters_.low && !lru_.empty()) {
    Drop(lru_.front());
    ++counters_.evictions;
  }
}

CacheCounters ChunkCache::Counters() const {
  MutexLock lock(&mu_);
  CacheCounters c = counters_;
  c.bytes += pending_bytes_;  // held now, if not yet on disk
  c.chunks += pending_.size();
  return c;
}

}  // namespace warren::blobfs
