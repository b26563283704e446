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

CacheKind ClassifyForCache(std::string_view path) {
  if (auto q = path.find('?'); q != std::string_view::npos)
    return CacheKind::kNone;  // queries vary
  if (path.find("/by-hash/") != std::string_view::npos) return CacheKind::kImmutable;
  for (std::string_view ext :
       {".deb", ".udeb", ".ddeb", ".whl", ".tgz", ".tar.gz", ".tar.xz", ".tar.bz2", ".tar.zst",
        ".zip", ".dsc", ".diff.gz", ".gem", ".crate"})
    if (EndsWith(path, ext)) return CacheKind::kImmutable;
  std::string_view last = path.substr(path.rfind('/') + 1);
  if (last == "InRelease" || last == "Release" || last == "Release.gpg") return CacheKind::kIndex;
  for (std::string_view prefix :
       {"Packages", "Sources", "Translation-", "Contents-", "Components-", "Index"})
    if (last.substr(0, prefix.size()) == prefix) return CacheKind::kIndex;
  if (path.find("/simple/") != std::string_view::npos) return CacheKind::kIndex;  // PEP 503 pages
  return CacheKind::kNone;
}

bool OneVariantForAll(std::string_view vary, std::string_view content_encoding) {
  auto trim = [](std::string_view t) {
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    return t;
  };
  auto lower_eq = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  bool any = false;
  for (size_t start = 0; start <= vary.size();) {
    size_t comma = vary.find(',', start);
    if (comma == std::string_view::npos) comma = vary.size();
    std::string_view token = trim(vary.substr(start, comma - start));
    start = comma + 1;
    if (token.empty()) continue;
    if (!lower_eq(token, "accept-encoding")) return false;
    any = true;
  }
  return !any || IdentityEncoded(content_encoding);
}

bool MayCarryCredential(std::string_view name) {
  std::string n(name);
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (std::string_view w :
       {"authorization", "authentication", "cookie", "token", "secret", "password", "passwd",
        "credential", "signature", "apikey", "api-key", "api_key", "-api", "x-auth"})
    if (n.find(w) != std::string::npos) return true;
  return false;
}

bool IdentityEncoded(std::string_view ce) {
  while (!ce.empty() && (ce.front() == ' ' || ce.front() == '\t')) ce.remove_prefix(1);
  while (!ce.empty() && (ce.back() == ' ' || ce.back() == '\t')) ce.remove_suffix(1);
  return ce.empty() ||
         (ce.size() == 8 && std::equal(ce.begin(), ce.end(), "identity", [](char x, char y) {
            return std::tolower(static_cast<unsigned char>(x)) == y;
          }));
}

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

std::string PackageCache::Key(const std::string& url) const { return dir_ + "/" + Sha256Hex(url); }

std::optional<CacheEntry> PackageCache::Lookup(const std::string& url) {
  if (dir_.empty()) return std::nullopt;
  const std::string key = Key(url);
  std::ifstream in(key + ".json");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object() || j.value("url", "") != url) return std::nullopt;  // digest collision or junk
  CacheEntry e;
  e.url = url;
  e.kind = j.value("kind", "") == "immutable" ? CacheKind::kImmutable : CacheKind::kIndex;
  e.status = j.value("status", 200);
  e.size = j.value("size", uint64_t{0});
  e.headers = j.value("headers", std::map<std::string, std::string>{});
  const std::string body = key + ".body";
  e.body = std::make_shared<UniqueFd>(open(body.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!*e.body || fstat(e.body->get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != e.size)
    return std::nullopt;
  futimens(e.body->get(), nullptr);  // recently used
  return e;
}

std::unique_ptr<PackageCache::Writer> PackageCache::Begin(const std::string& url) {
  if (dir_.empty()) return nullptr;
  auto w = std::unique_ptr<Writer>(new Writer());
  w->cache_ = this;
  w->key_ = Key(url);
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

void PackageCache::Writer::Commit(CacheEntry meta) {
  if (failed_ || written_ != meta.size) return;
  nlohmann::json j = {{"url", meta.url},
                      {"kind", meta.kind == CacheKind::kImmutable ? "immutable" : "index"},
                      {"status", meta.status},
                      {"size", meta.size},
                      {"headers", meta.headers}};
  const std::string s = j.dump(), meta_tmp = tmp_ + ".json";
  UniqueFd m(open(meta_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!m || write(m.get(), s.data(), s.size()) != static_cast<ssize_t>(s.size())) {
    unlink(meta_tmp.c_str());
    return;
  }
  struct stat old;
  const bool replaced = stat((key_ + ".body").c_str(), &old) == 0;
  // Body first, then its metadata: a reader that finds the new metadata finds its body.
  if (rename(tmp_.c_str(), (key_ + ".body").c_str()) != 0 ||
      rename(meta_tmp.c_str(), (key_ + ".json").c_str()) != 0) {
    unlink(meta_tmp.c_str());
    return;
  }
  done_ = true;
  if (replaced)
    cache_->total_ -= std::min<uint64_t>(cache_->total_, static_cast<uint64_t>(old.st_size));
  else
    ++cache_->entries_;
  cache_->total_ += written_;
  cache_->EvictIfFull();
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
