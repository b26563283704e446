#include "net/cache_policy.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace warren::net {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string_view Trim(std::string_view t) {
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  return t;
}

bool LowerEq(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Each comma-separated token of a header list, trimmed.
template <class F>
void ForEachToken(std::string_view list, F f) {
  for (size_t start = 0; start <= list.size();) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view token = Trim(list.substr(start, comma - start));
    start = comma + 1;
    if (!token.empty()) f(token);
  }
}

bool NpmClient(const RequestHints& h) {
  return h.npm_headers || StartsWith(h.user_agent, "npm/") ||
         Lower(h.accept).find("application/vnd.npm.install-v1+json") != std::string::npos;
}

// An npm packument's path: /name, /@scope/name or /@scope%2fname (no further segments).
bool PackumentPath(std::string_view path) {
  if (path.size() < 2 || path.front() != '/') return false;
  std::string_view rest = path.substr(1);
  if (rest.front() == '@') {
    size_t sep = rest.find('/');
    if (sep == std::string_view::npos) {
      std::string lower = Lower(rest);
      sep = lower.find("%2f");
      if (sep == std::string::npos || sep + 3 >= rest.size()) return false;
      return rest.find('/', sep + 3) == std::string_view::npos;
    }
    return sep + 1 < rest.size() && rest.find('/', sep + 1) == std::string_view::npos;
  }
  return rest.find('/') == std::string_view::npos && rest.front() != '-';
}

// PyPI's JSON API: /pypi/NAME/json or /pypi/NAME/VERSION/json.
bool PypiJsonPath(std::string_view path) {
  if (!StartsWith(path, "/pypi/") || !EndsWith(path, "/json")) return false;
  const auto slashes = std::count(path.begin(), path.end(), '/');
  return slashes == 3 || slashes == 4;
}

Result<int64_t> ParseMs(std::string_view v, std::string_view what) {
  v = Trim(v);
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || n < 0)
    return Invalid("a freshness window wants a duration", std::string(what));
  std::string_view unit(p, static_cast<size_t>(v.data() + v.size() - p));
  int64_t scale;
  if (unit.empty() || unit == "s")
    scale = 1000;
  else if (unit == "ms")
    scale = 1;
  else if (unit == "m")
    scale = 60'000;
  else
    return Invalid("a freshness window's unit is ms, s or m", std::string(what));
  if (n > INT64_MAX / scale / 2)
    return Invalid("a freshness window is too long", std::string(what));
  return n * scale;
}

}  // namespace

std::string_view RegistryName(Registry r) {
  switch (r) {
    case Registry::kApt:
      return "apt";
    case Registry::kPypi:
      return "pypi";
    case Registry::kNpm:
      return "npm";
    case Registry::kOther:
      break;
  }
  return "other";
}

CacheClass ClassifyRequest(std::string_view path, const RequestHints& hints) {
  if (path.find('?') != std::string_view::npos) return {};  // queries vary
  std::string_view last = path.substr(path.rfind('/') + 1);
  const bool npm = NpmClient(hints);
  if (path.find("/by-hash/") != std::string_view::npos)
    return {CacheKind::kImmutable, Registry::kApt};
  for (std::string_view ext : {".deb", ".udeb", ".ddeb", ".dsc", ".diff.gz"})
    if (EndsWith(path, ext)) return {CacheKind::kImmutable, Registry::kApt};
  if (EndsWith(path, ".tgz") && path.find("/-/") != std::string_view::npos)
    return {CacheKind::kImmutable, Registry::kNpm};
  if (EndsWith(path, ".whl")) return {CacheKind::kImmutable, Registry::kPypi};
  for (std::string_view ext :
       {".tgz", ".tar.gz", ".tar.xz", ".tar.bz2", ".tar.zst", ".zip", ".gem", ".crate"}) {
    if (!EndsWith(path, ext)) continue;
    if (StartsWith(path, "/packages/")) return {CacheKind::kImmutable, Registry::kPypi};
    return {CacheKind::kImmutable, npm ? Registry::kNpm : Registry::kOther};
  }
  if (last == "InRelease" || last == "Release" || last == "Release.gpg")
    return {CacheKind::kIndex, Registry::kApt};
  for (std::string_view prefix :
       {"Packages", "Sources", "Translation-", "Contents-", "Components-", "Index"})
    if (StartsWith(last, prefix)) return {CacheKind::kIndex, Registry::kApt};
  if (path.find("/simple/") != std::string_view::npos)  // PEP 503 and 691 pages
    return {CacheKind::kIndex, Registry::kPypi, true};
  if (PypiJsonPath(path)) return {CacheKind::kIndex, Registry::kPypi};
  if (npm && PackumentPath(path)) return {CacheKind::kIndex, Registry::kNpm, true};
  return {};
}

CacheKind ClassifyForCache(std::string_view path) { return ClassifyRequest(path, {}).kind; }

std::string CacheKey(const std::string& url, const CacheClass& cls, std::string_view accept) {
  if (!cls.keyed_by_accept) return url;
  std::string a;
  for (char ch : accept)
    if (ch != ' ' && ch != '\t')
      a += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return url + "\naccept: " + a;
}

bool OneVariantForAll(std::string_view vary, std::string_view content_encoding,
                      bool keyed_by_accept) {
  bool by_encoding = false, other = false;
  ForEachToken(vary, [&](std::string_view token) {
    if (LowerEq(token, "accept-encoding"))
      by_encoding = true;
    else if (!(keyed_by_accept && LowerEq(token, "accept")))
      other = true;
  });
  if (other) return false;
  return !by_encoding || IdentityEncoded(content_encoding);
}

bool MayCarryCredential(std::string_view name) {
  const std::string n = Lower(name);
  for (std::string_view w :
       {"authorization", "authentication", "cookie", "token", "secret", "password", "passwd",
        "credential", "signature", "apikey", "api-key", "api_key", "-api", "x-auth"})
    if (n.find(w) != std::string::npos) return true;
  return false;
}

bool IdentityEncoded(std::string_view ce) {
  ce = Trim(ce);
  return ce.empty() || LowerEq(ce, "identity");
}

int64_t FreshnessWindows::For(Registry r) const {
  switch (r) {
    case Registry::kApt:
      return apt_ms;
    case Registry::kPypi:
      return pypi_ms;
    case Registry::kNpm:
      return npm_ms;
    case Registry::kOther:
      break;
  }
  return other_ms;
}

Result<FreshnessWindows> FreshnessWindows::Parse(std::string_view text) {
  FreshnessWindows w;
  text = Trim(text);
  if (text.empty()) return w;
  if (text.find('=') == std::string_view::npos) {
    int64_t ms = WARREN_TRY(ParseMs(text, text));
    w.apt_ms = w.pypi_ms = w.npm_ms = w.other_ms = ms;
    return w;
  }
  Status bad;
  ForEachToken(text, [&](std::string_view item) {
    if (!bad.ok()) return;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      bad = Invalid("give registry=duration pairs (apt, pypi, npm, other)", std::string(item));
      return;
    }
    std::string_view name = Trim(item.substr(0, eq));
    auto ms = ParseMs(item.substr(eq + 1), item);
    if (!ms.ok()) {
      bad = ms.status();
      return;
    }
    if (name == "apt")
      w.apt_ms = *ms;
    else if (name == "pypi")
      w.pypi_ms = *ms;
    else if (name == "npm")
      w.npm_ms = *ms;
    else if (name == "other")
      w.other_ms = *ms;
    else
      bad = Invalid("the registries are apt, pypi, npm and other", std::string(item));
  });
  if (!bad.ok()) return bad;
  return w;
}

int64_t FreshForMs(const FreshnessWindows& windows, Registry registry,
                   std::string_view cache_control) {
  int64_t fresh = windows.For(registry);
  ForEachToken(cache_control, [&](std::string_view d) {
    std::string lower = Lower(d);
    if (lower == "no-cache") {
      fresh = 0;
      return;
    }
    for (std::string_view name : {"max-age=", "s-maxage="}) {
      if (!StartsWith(lower, name)) continue;
      std::string_view v = std::string_view(lower).substr(name.size());
      if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() >= 2 ? v.size() - 2 : 0);
      int64_t s = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
      if (ec == std::errc() && p == v.data() + v.size() && s >= 0 && s < INT64_MAX / 1000)
        fresh = std::min(fresh, s * 1000);
    }
  });
  return fresh;
}

}  // namespace warren::net
