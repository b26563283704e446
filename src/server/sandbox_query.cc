#include "server/sandbox_query.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "base/utf8.h"

namespace warren::server {
namespace {

// A token is base64 of "created_at\nid": opaque to clients, and checked when it comes back.
constexpr char kTokenSeparator = '\n';

Result<std::pair<std::string, std::string>> ParsePageToken(const std::string& token) {
  std::string raw;
  size_t sep = std::string::npos;
  if (Base64Decode(token, &raw)) sep = raw.find(kTokenSeparator);
  if (sep == std::string::npos || sep == 0 || sep + 1 == raw.size())
    return Invalid("`page_token` is not one this server gave");
  return std::make_pair(raw.substr(0, sep), raw.substr(sep + 1));
}

Result<size_t> ParseLimit(const std::string& v) {
  size_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > SandboxQuery::kMaxLimit)
    return Invalid(
        "`limit` must be a whole number from 1 to " + std::to_string(SandboxQuery::kMaxLimit), v);
  return n;
}

bool Before(const SandboxRecord* a, const SandboxRecord* b) {
  return std::tie(a->created_at, a->id) < std::tie(b->created_at, b->id);
}

}  // namespace

std::string PageTokenAfter(const SandboxRecord& sb) {
  return Base64Encode(sb.created_at + kTokenSeparator + sb.id);
}

Result<SandboxQuery> ParseSandboxQuery(const std::map<std::string, std::string>& params) {
  SandboxQuery q;
  for (const auto& [k, v] : params) {
    if (k == "parent") {
      q.parent = v;
    } else if (k == "state") {
      if (v == "deleted")
        q.matches_none = true;
      else
        q.state = WARREN_TRY(ParseSandboxState(v));
    } else if (k == "label") {
      // Several label filters arrive joined by '&' in one value (see http_server.cc).
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, '&')) {
        size_t eq = item.find('=');
        if (eq == std::string::npos) return Invalid("label filter must be KEY=VALUE", item);
        q.labels.emplace_back(item.substr(0, eq), item.substr(eq + 1));
      }
    } else if (k == "backend") {
      q.backend = runtime::ParseBackendKind(v);
      if (!q.backend) return Invalid("unknown backend `" + v + "`");
    } else if (k == "image") {
      q.image = v;
    } else if (k == "limit") {
      q.limit = WARREN_TRY(ParseLimit(v));
    } else if (k == "page_token") {
      if (!v.empty()) q.after = WARREN_TRY(ParsePageToken(v));
    } else {
      return Invalid("unknown query parameter `" + k + "`");
    }
  }
  return q;
}

bool SandboxQuery::Matches(const SandboxRecord& sb) const {
  if (matches_none) return false;
  if (state && sb.state != *state) return false;
  if (parent && (!sb.lineage || sb.lineage->parent != *parent)) return false;
  if (backend && sb.spec.backend != *backend) return false;
  if (image && sb.spec.image != *image) return false;
  for (const auto& [k, v] : labels)
    if (auto it = sb.spec.labels.find(k); it == sb.spec.labels.end() || it->second != v)
      return false;
  return true;
}

SandboxPage SelectPage(const std::vector<const SandboxRecord*>& candidates, const SandboxQuery& q) {
  SandboxPage page;
  std::vector<const SandboxRecord*> hits;
  for (const SandboxRecord* sb : candidates)
    if (q.Matches(*sb)) hits.push_back(sb);
  page.total = hits.size();
  // Only the page is put in order: a partial sort of the ones after the token.
  auto first = hits.begin();
  if (q.after) {
    first = std::partition(hits.begin(), hits.end(), [&](const SandboxRecord* sb) {
      return std::tie(sb->created_at, sb->id) <= std::tie(q.after->first, q.after->second);
    });
  }
  const size_t rest = static_cast<size_t>(hits.end() - first);
  const size_t n = q.limit == 0 ? rest : std::min(q.limit, rest);
  std::partial_sort(first, first + static_cast<ptrdiff_t>(n), hits.end(), Before);
  page.items.assign(first, first + static_cast<ptrdiff_t>(n));
  if (q.limit != 0 && n < rest) page.next_page_token = PageTokenAfter(*page.items.back());
  return page;
}

}  // namespace warren::server
