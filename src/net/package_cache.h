// The egress proxy's shared cache of package downloads (plain HTTP: Debian archives, PyPI
// and npm mirrors). What is cached, and how it is reused:
//   immutable - files named by version or digest (.deb, wheels, sdists, npm tarballs,
//               by-hash/ indexes): served from the cache as long as it holds them;
//   index     - InRelease, Packages, Sources, pip's /simple/ pages...: stored with their
//               validators (ETag, Last-Modified) and revalidated upstream on every use; a
//               304 serves the stored copy. Without a validator they are not reused.
// Responses marked no-store or private, and requests with credentials, are never stored.
// One file per entry under the cache directory, named by the URL's digest, with its
// metadata beside it; least recently used entries go when the cache is over its size.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::net {

enum class CacheKind { kNone, kImmutable, kIndex };

// How a URL path is cached (see above).
CacheKind ClassifyForCache(std::string_view path);

// Whether a response with these `Vary` and `Content-Encoding` headers may serve every client:
// one copy is stored per URL, so no variants, except the unencoded variant of a response that
// varies by Accept-Encoding only (CDNs add that to everything; every client takes identity).
bool OneVariantForAll(std::string_view vary, std::string_view content_encoding);
// Whether a request header may carry a credential: Authorization and Cookie, and the names
// registries use instead (X-JFrog-Art-Api, Private-Token, X-Api-Key, X-Auth-Token...). A
// request with one is never cached: its answer may be for that client only. Metadata that
// merely mentions auth (npm's `npm-auth-type: web`, sent with every npm request) is not one.
bool MayCarryCredential(std::string_view header_name);
// No Content-Encoding, or identity: the body as every client can take it.
bool IdentityEncoded(std::string_view content_encoding);

struct CacheEntry {
  std::string url;
  CacheKind kind = CacheKind::kNone;
  int status = 200;
  std::map<std::string, std::string> headers;  // Content-Type, ETag, Last-Modified, ...
  uint64_t size = 0;
  std::shared_ptr<UniqueFd> body;  // opened by Lookup: an eviction or replacement after it
                                   // cannot mix this entry's headers with another body
};

class PackageCache {
 public:
  PackageCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  Status Init();

  std::optional<CacheEntry> Lookup(const std::string& url);

  // A new entry being written while the response streams to the client.
  class Writer {
   public:
    ~Writer();  // not committed: removed
    bool Append(const char* data, size_t n);
    // Makes the entry visible (replacing an older one) if `size` bytes were written.
    void Commit(CacheEntry meta);

   private:
    friend class PackageCache;
    PackageCache* cache_ = nullptr;
    std::string key_, tmp_;
    UniqueFd fd_;
    uint64_t written_ = 0;
    bool failed_ = false, done_ = false;
  };
  std::unique_ptr<Writer> Begin(const std::string& url);

  uint64_t bytes() const { return total_.load(); }
  uint64_t entries() const { return entries_.load(); }

 private:
  std::string Key(const std::string& url) const;
  void EvictIfFull();

  std::string dir_;
  uint64_t max_bytes_;
  std::atomic<uint64_t> total_{0}, entries_{0};
  std::mutex evict_mu_;
};

}  // namespace warren::net
