#include "server/e2b/control_plane.h"

#include <algorithm>

#include "base/ids.h"
#include "base/utf8.h"
#include "server/e2b/connect_protocol.h"

namespace warren::server::e2b {

using nlohmann::json;

namespace {

bool PercentDecode(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i] == '+' ? ' ' : s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    if (!isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !isxdigit(static_cast<unsigned char>(s[i + 2])))
      return false;
    out->push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
    i += 2;
  }
  return true;
}

bool DecodeTwice(std::string_view s, std::string* out) {
  std::string once;
  return PercentDecode(s, &once) && PercentDecode(once, out);
}

double EndOf(const SandboxRecord& sb) {
  return ParseRfc3339(sb.created_at) + static_cast<double>(sb.spec.ttl_s);
}

json Common(const SandboxRecord& sb) {
  json j = {{"sandboxID", sb.id},
            {"templateID", TemplateOfImage(sb.spec.image)},
            {"alias", TemplateOfImage(sb.spec.image)},
            {"clientID", "warren"},
            {"startedAt", sb.created_at},
            {"endAt", Rfc3339(EndOf(sb))},
            {"state", E2bState(sb).value_or("running")},
            {"cpuCount", std::max(1, static_cast<int>(sb.spec.cpu + 0.999))},
            {"memoryMB", sb.spec.memory_mb},
            {"diskSizeMB", sb.spec.disk_mb},
            {"envdVersion", kEnvdVersion},
            {"metadata", sb.spec.labels}};
  return j;
}

}  // namespace

std::string ImageOfTemplate(const std::string& template_id) {
  return template_id.find(':') == std::string::npos ? template_id + ":latest" : template_id;
}

std::string TemplateOfImage(const std::string& image) {
  constexpr std::string_view kLatest = ":latest";
  if (image.size() > kLatest.size() && image.ends_with(kLatest))
    return image.substr(0, image.size() - kLatest.size());
  return image;
}

std::optional<std::string> E2bState(const SandboxRecord& sb) {
  if (sb.state == SandboxState::kRunning) return "running";
  if (sb.state == SandboxState::kPaused) return "paused";
  return std::nullopt;
}

json SandboxJson(const SandboxRecord& sb, const std::optional<std::string>& access_token) {
  return {{"sandboxID", sb.id},
          {"templateID", TemplateOfImage(sb.spec.image)},
          {"alias", TemplateOfImage(sb.spec.image)},
          {"clientID", "warren"},
          {"envdVersion", kEnvdVersion},
          {"envdAccessToken", access_token ? json(*access_token) : json(nullptr)},
          {"trafficAccessToken", nullptr},
          {"domain", nullptr}};
}

json DetailJson(const SandboxRecord& sb, const std::optional<std::string>& access_token) {
  json j = Common(sb);
  j["envdAccessToken"] = access_token ? json(*access_token) : json(nullptr);
  j["allowInternetAccess"] = sb.spec.network.mode != "none";
  j["domain"] = nullptr;
  return j;
}

json ListedJson(const SandboxRecord& sb) { return Common(sb); }

Result<ListQuery> ParseListQuery(const Query& q) {
  ListQuery out;
  for (const auto& [k, v] : q) {
    if (k == "state") {
      out.states.clear();
      size_t start = 0;
      while (start <= v.size()) {
        size_t comma = v.find(',', start);
        if (comma == std::string::npos) comma = v.size();
        std::string s = v.substr(start, comma - start);
        if (s != "running" && s != "paused") return Invalid("`state` takes running and paused", s);
        out.states.push_back(s);
        start = comma + 1;
      }
    } else if (k == "metadata") {
      size_t start = 0;
      while (start < v.size()) {
        size_t amp = v.find('&', start);
        if (amp == std::string::npos) amp = v.size();
        std::string_view item = std::string_view(v).substr(start, amp - start);
        size_t eq = item.find('=');
        std::string key, value;
        if (eq == std::string_view::npos || !DecodeTwice(item.substr(0, eq), &key) ||
            !DecodeTwice(item.substr(eq + 1), &value))
          return Invalid("`metadata` must be an encoded query string of KEY=VALUE");
        out.metadata[key] = value;
        start = amp + 1;
      }
    } else if (k == "order") {
      if (v != "asc" && v != "desc") return Invalid("`order` is asc or desc");
      out.ascending = v == "asc";
    } else if (k == "startedAfter") {
      double t = ParseRfc3339(v);
      if (t <= 0) return Invalid("`startedAfter` must be an RFC 3339 time", v);
      out.started_after = t;
    } else if (k == "template") {
      out.template_id = v;
    } else if (k == "limit") {
      char* end = nullptr;
      long n = strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 1000) return Invalid("`limit` must be 1 to 1000");
      out.limit = static_cast<size_t>(n);
    } else if (k == "nextToken") {
      out.next_token = v;
    } else if (k == "query") {
      // The first SDKs' JSON-encoded filter; GET /sandboxes (v1) takes it.
      json f = json::parse(v, nullptr, false);
      if (!f.is_object()) return Invalid("`query` must be a JSON object");
      if (f.contains("metadata") && f["metadata"].is_object())
        for (const auto& [mk, mv] : f["metadata"].items())
          if (mv.is_string()) out.metadata[mk] = mv.get<std::string>();
    }
    // Other parameters (E2B's later additions) narrow nothing here.
  }
  return out;
}

ListPage Paginate(std::vector<SandboxRecord> all, const ListQuery& q) {
  std::erase_if(all, [&](const SandboxRecord& sb) {
    auto state = E2bState(sb);
    if (!state || std::find(q.states.begin(), q.states.end(), *state) == q.states.end())
      return true;
    for (const auto& [k, v] : q.metadata)
      if (auto it = sb.spec.labels.find(k); it == sb.spec.labels.end() || it->second != v)
        return true;
    if (q.started_after && ParseRfc3339(sb.created_at) <= *q.started_after) return true;
    if (q.template_id && TemplateOfImage(sb.spec.image) != TemplateOfImage(*q.template_id))
      return true;
    return false;
  });
  // By start time, then id: a total order, so a page's token says exactly where it ended.
  auto key = [](const SandboxRecord& sb) { return sb.created_at + "|" + sb.id; };
  std::sort(all.begin(), all.end(), [&](const SandboxRecord& a, const SandboxRecord& b) {
    return q.ascending ? key(a) < key(b) : key(a) > key(b);
  });
  ListPage page;
  std::string after;
  if (!q.next_token.empty() && !Base64Decode(q.next_token, &after)) after.clear();
  size_t i = 0;
  if (!after.empty())
    while (i < all.size() && (q.ascending ? key(all[i]) <= after : key(all[i]) >= after)) ++i;
  for (; i < all.size() && page.items.size() < q.limit; ++i) page.items.push_back(all[i]);
  if (i < all.size() && !page.items.empty()) {
    std::string token = Base64Encode(key(page.items.back()));
    // URL-safe, so that the SDK's query encoding leaves it as it is.
    for (char& c : token) c = c == '+' ? '-' : c == '/' ? '_' : c;
    std::erase(token, '=');
    page.next_token = token;
  }
  return page;
}

HttpReply ApiError(int status, const std::string& message) {
  return HttpReply::Json({{"code", status}, {"message", SanitizeUtf8(message)}}, status);
}

HttpReply ApiError(const Status& st) {
  int status = HttpStatusOf(st.code());
  // Out of room in the sandbox: E2B's 507 (the SDK's NotEnoughSpaceError).
  if (OutOfSpace(st)) status = 507;
  const std::string msg = PublicMessage(st);
  HttpReply r = ApiError(status, msg);
  if (st.retry_after_s() > 0)
    r.headers.emplace_back("Retry-After", std::to_string(st.retry_after_s()));
  else if (status == 429)
    r.headers.emplace_back("Retry-After", "1");
  return r;
}

}  // namespace warren::server::e2b
