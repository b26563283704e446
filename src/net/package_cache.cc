#include "net/package_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "base/sha256.h"

namespace warren::net {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Status PackageCache::Init() {
  if (dir_.empty()) return Status::Ok();  // no cache: every lookup misses, nothing is stored
  if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", dir_);
  DIR* d = opendir(dir_.c_str());
  if (!d) return ErrnoStatus("opendir", dir_);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    struct stat st;
    if (name.find(".tmp.") != std::string::npos) {
      unlinkat(dirfd(d), name.c_str(), 0);  // a write a crash interrupted
    } else if (EndsWith(name, ".body") && fstatat(dirfd(d), name.c_str(), &st, 0) == 0) {
      total_ += static_cast<uint64_t>(st.st_size);
      ++entries_;
    }
  }
  closedir(d);
  return Status::Ok();
}

std::string PackageCache::Path(const std::string& key) const { return dir_ + "/" + Sha256Hex(key); }

namespace {

Registry RegistryNamed(std::string_view name) {
  for (Registry r : kAllRegistries)
    if (RegistryName(r) == name) return r;
  return Registry::kOther;
}

}  // namespace

std::optional<CacheEntry> PackageCache::Lookup(const std::string& key) {
  if (dir_.empty()) return std::nullopt;
  const std::string path = Path(key);
  std::ifstream in(path + ".json");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object() || j.value("url", "") != key) return std::nullopt;  // digest collision or junk
  CacheEntry e;
  e.key = key;
  e.kind = j.value("kind", "") == "immutable" ? CacheKind::kImmutable : CacheKind::kIndex;
  e.registry = RegistryNamed(j.value("registry", "other"));
  e.validated_ms = j.value("validated_ms", int64_t{0});
  e.status = j.value("status", 200);
  e.size = j.value("size", uint64_t{0});
  e.headers = j.value("headers", std::map<std::string, std::string>{});
  const std::string body = path + ".body";
  e.body = std::make_shared<UniqueFd>(open(body.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!*e.body || fstat(e.body->get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != e.size)
    return std::nullopt;
  futimens(e.body->get(), nullptr);  // recently used
  return e;
}

bool PackageCache::WriteMeta(const std::string& path, const CacheEntry& meta) {
  nlohmann::json j = {{"url", meta.key},
                      {"kind", meta.kind == CacheKind::kImmutable ? "immutable" : "index"},
                      {"registry", RegistryName(meta.registry)},
                      {"validated_ms", meta.validated_ms},
                      {"status", meta.status},
                      {"size", meta.size},
                      {"headers", meta.headers}};
  const std::string s = j.dump();
  UniqueFd m(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!m || write(m.get(), s.data(), s.size()) != static_cast<ssize_t>(s.size())) {
    unlink(path.c_str());
    return false;
  }
  return true;
}

void PackageCache::Revalidated(const CacheEntry& entry, int64_t validated_ms) {
  if (dir_.empty()) return;
  CacheEntry meta = entry;
  meta.validated_ms = validated_ms;
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string path = Path(entry.key), tmp = path + ".tmp." + std::to_string(rng()) + ".json";
  // Only if the body is still the one this entry describes: a replacement since then has its
  // own metadata, which must not be overwritten with this one's.
  struct stat now, had;
  if (!WriteMeta(tmp, meta) || stat((path + ".body").c_str(), &now) != 0 ||
      fstat(entry.body->get(), &had) != 0 || now.st_ino != had.st_ino ||
      rename(tmp.c_str(), (path + ".json").c_str()) != 0)
    unlink(tmp.c_str());
}

std::unique_ptr<PackageCache::Writer> PackageCache::Begin(const std::string& key) {
  if (dir_.empty()) return nullptr;
  auto w = std::unique_ptr<Writer>(new Writer());
  w->cache_ = this;
  w->key_ = Path(key);
  static thread_local std::mt19937_64 rng(std::random_device{}());
  w->tmp_ = w->key_ + ".tmp." + std::to_string(rng());
  w->fd_ = UniqueFd(open(w->tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!w->fd_) return nullptr;
  return w;
}

PackageCache::Writer::~Writer() {
  if (!done_) unlink(tmp_.c_str());
}

bool PackageCache::Writer::Append(const char* data, size_t n) {
  if (failed_) return false;
  while (n > 0) {
    ssize_t w = write(fd_.get(), data, n);
    if (w <= 0) {
      failed_ = true;  // disk full or the like: the client still gets its bytes
      return false;
    }
    data += w, n -= static_cast<size_t>(w), written_ += static_cast<uint64_t>(w);
  }
  return true;
}

std::shared_ptr<UniqueFd> PackageCache::Writer::OpenReader() const {
  auto fd = std::make_shared<UniqueFd>(open(tmp_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!*fd) return nullptr;
  return fd;
}

bool PackageCache::Writer::Commit(CacheEntry meta) {
  if (failed_ || written_ != meta.size) return false;
  const std::string meta_tmp = tmp_ + ".json";
  if (!cache_->WriteMeta(meta_tmp, meta)) return false;
  struct stat old;
  const bool replaced = stat((key_ + ".body").c_str(), &old) == 0;
  // Body first, then its metadata: a reader that finds the new metadata finds its body.
  if (rename(tmp_.c_str(), (key_ + ".body").c_str()) != 0 ||
      rename(meta_tmp.c_str(), (key_ + ".json").c_str()) != 0) {
    unlink(meta_tmp.c_str());
    return false;
  }
  done_ = true;
  if (replaced)
    cache_->total_ -= std::min<uint64_t>(cache_->total_, static_cast<uint64_t>(old.st_size));
  else
    ++cache_->entries_;
  cache_->total_ += written_;
  cache_->EvictIfFull();
  return true;
}

void PackageCache::EvictIfFull() {
  if (total_ <= max_bytes_) return;
  std::unique_lock lock(evict_mu_, std::try_to_lock);
  if (!lock) return;  // someone else is at it
  struct Item {
    int64_t mtime;
    uint64_t size;
    std::string base;
  };
  std::vector<Item> items;
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      struct stat st;
      if (EndsWith(name, ".body") && fstatat(dirfd(d), name.c_str(), &st, 0) == 0)
        items.push_back({st.st_mtim.tv_sec, static_cast<uint64_t>(st.st_size),
                         dir_ + "/" + name.substr(0, name.size() - 5)});
    }
    closedir(d);
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.mtime < b.mtime; });
  for (const Item& it : items) {
    if (total_ <= max_bytes_ * 9 / 10) break;
    unlink((it.base + ".json").c_str());
    if (unlink((it.base + ".body").c_str()) == 0) {
      total_ -= std::min<uint64_t>(total_, it.size);
      --entries_;
    }
  }
}

}  // namespace warren::net
