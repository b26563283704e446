// What the egress proxy's package cache keeps, under which key, and for how long: pure
// functions of a request's path and headers and a response's headers, so the rules are
// tested without sockets (the proxy applies them; net/package_cache.h stores).
//   immutable - files named by version or digest (.deb, wheels, sdists, npm tarballs,
//               by-hash/ indexes): served from the cache as long as it holds them;
//   index     - registry metadata (apt's InRelease and Packages, PyPI's simple pages and JSON
//               API, npm packuments): stored with their validators and served without asking
//               upstream for the registry's freshness window, then revalidated (a 304 serves
//               the stored copy again for another window).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace warren::net {

enum class CacheKind { kNone, kImmutable, kIndex };

// The package ecosystem an answer belongs to: freshness windows and metrics are per registry.
enum class Registry { kApt, kPypi, kNpm, kOther };
inline constexpr Registry kAllRegistries[] = {Registry::kApt, Registry::kPypi, Registry::kNpm,
                                              Registry::kOther};
std::string_view RegistryName(Registry r);

// The request headers that say which client asks (npm marks its requests).
struct RequestHints {
  std::string_view accept;
  std::string_view user_agent;
  bool npm_headers = false;  // npm-command, npm-session... present
};

struct CacheClass {
  CacheKind kind = CacheKind::kNone;
  Registry registry = Registry::kOther;
  // The answer varies by the client's Accept (npm's abbreviated packuments, PEP 691's JSON
  // simple pages): the Accept header is part of the key, and `Vary: Accept` is honoured.
  bool keyed_by_accept = false;
};

// How the answer to a GET of `path` (origin-form, with its query) is cached.
CacheClass ClassifyRequest(std::string_view path, const RequestHints& hints);
// The kind alone, for a path whatever the client (tests, and callers without headers).
CacheKind ClassifyForCache(std::string_view path);

// The cache key: the URL, and for answers keyed by Accept that header, normalised.
std::string CacheKey(const std::string& url, const CacheClass& cls, std::string_view accept);

// Whether a response with these `Vary` and `Content-Encoding` headers may serve every client
// asking under one key: no variants beyond what the key holds (Accept when `keyed_by_accept`),
// except the unencoded variant of a response that varies by Accept-Encoding (CDNs add that to
// everything; every client takes identity).
bool OneVariantForAll(std::string_view vary, std::string_view content_encoding,
                      bool keyed_by_accept = false);
// Whether a request header may carry a credential: Authorization and Cookie, and the names
// registries use instead (X-JFrog-Art-Api, Private-Token, X-Api-Key, X-Auth-Token...). A
// request with one is never cached: its answer may be for that client only. Metadata that
// merely mentions auth (npm's `npm-auth-type: web`, sent with every npm request) is not one.
bool MayCarryCredential(std::string_view header_name);
// No Content-Encoding, or identity: the body as every client can take it.
bool IdentityEncoded(std::string_view content_encoding);

// How long registry metadata serves without asking upstream, per registry: the staleness an
// operator accepts for fewer upstream requests. A client's own `Cache-Control: max-age=0`
// (pip and apt send it with every index request) does not shorten it: the window bounds what
// any client sees.
struct FreshnessWindows {
  int64_t apt_ms = 120'000;
  int64_t pypi_ms = 60'000;
  int64_t npm_ms = 60'000;
  int64_t other_ms = 0;  // metadata of no known registry: revalidated on every use

  int64_t For(Registry r) const;
  // "30" (every registry, seconds), or "npm=60,pypi=60,apt=120,other=0"; a unit (ms, s, m)
  // may follow a number.
  static Result<FreshnessWindows> Parse(std::string_view text);
};

// The window for a stored answer: the registry's, shortened to the upstream's own `max-age`
// (or `s-maxage`) when that is shorter; 0 (revalidate every use) for `no-cache`.
int64_t FreshForMs(const FreshnessWindows& windows, Registry registry,
                   std::string_view cache_control);

}  // namespace warren::net
