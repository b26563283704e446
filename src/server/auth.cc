#include "server/auth.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "base/ids.h"
#include "base/sha256.h"
#include "base/unique_fd.h"
#include "server/state_store.h"

namespace warren::server {

using nlohmann::json;

namespace {
constexpr const char* kTokenKind = "token";
constexpr std::string_view kBearer = "Bearer ";
}  // namespace

json Quotas::ToJson() const {
  return {{"max_sandboxes", max_sandboxes}, {"max_cpu", max_cpu},
          {"max_memory_mb", max_memory_mb}, {"create_rate", create_rate},
          {"max_calls", max_calls},         {"call_rate", call_rate}};
}

bool Principal::admin() const {
  return std::find(scopes.begin(), scopes.end(), "admin") != scopes.end();
}

bool Principal::Allows(std::string_view scope) const {
  for (const auto& s : scopes) {
    if (s == "admin" || s == scope) return true;
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ":*") == 0 &&
        scope.substr(0, s.size() - 1) == std::string_view(s).substr(0, s.size() - 1))
      return true;
  }
  return false;
}

const std::vector<std::string>& KnownScopes() {
  static const std::vector<std::string> k = {"admin",         "sandbox:*",  "sandbox:read",
                                             "sandbox:write", "exec",       "call",
                                             "image:*",       "image:read", "image:write"};
  return k;
}

std::vector<std::string> DefaultScopes() { return {"sandbox:*", "exec", "call", "image:read"}; }

Result<std::string> LoadOrCreateAdminToken(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd) {
    char buf[256];
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) return ErrnoStatus("read", path);
    std::string tok(buf, static_cast<size_t>(n));
    while (!tok.empty() && (tok.back() == '\n' || tok.back() == ' ')) tok.pop_back();
    if (tok.size() < 16) return Invalid("token file holds no usable token", path);
    return tok;
  }
  if (errno != ENOENT) return ErrnoStatus("open", path);
  std::string tok = "wt_" + RandomHex(24);
  UniqueFd out(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out) return ErrnoStatus("create", path);
  std::string line = tok + "\n";
  if (write(out.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return ErrnoStatus("write", path);
  return tok;
}

bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kPrefix = kBearer;
  if (header.size() < kPrefix.size() || header.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view given = header.substr(kPrefix.size());
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(token[i] ^ (i < given.size() ? given[i] : 0));
  return diff == 0;
}

namespace {

Principal FromRecord(const json& r) {
  Principal p;
  p.name = r.value("name", "");
  for (const auto& s : r.value("scopes", json::array())) p.scopes.push_back(s.get<std::string>());
  const json q = r.value("quotas", json::object());
  p.quotas.max_sandboxes = q.value("max_sandboxes", int64_t{0});
  p.quotas.max_cpu = q.value("max_cpu", 0.0);
  p.quotas.max_memory_mb = q.value("max_memory_mb", int64_t{0});
  p.quotas.create_rate = q.value("create_rate", 0.0);
  p.quotas.max_calls = q.value("max_calls", int64_t{0});
  p.quotas.call_rate = q.value("call_rate", 0.0);
  return p;
}

bool ValidTokenName(const std::string& n) {
  if (n.empty() || n.size() > 64 || n == "admin") return false;
  for (char c : n)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

}  // namespace

TokenRegistry::TokenRegistry(StateStore* state, std::string admin_token)
    : state_(state), admin_token_(std::move(admin_token)) {}

Status TokenRegistry::Load() { return Reload(); }

Status TokenRegistry::Reload() const {
  // Read first, then swap in whole: a token removed meanwhile (by another API server of a
  // cluster) goes, and a store that cannot be read changes nothing. A token this registry
  // made or removed while the read was under way may be missing from what was read: then
  // the read is older than the maps, and is made again (or, after a few tries, dropped).
  for (int attempt = 0; attempt < 3; ++attempt) {
    uint64_t before;
    {
      MutexLock lock(&mu_);
      before = writes_;
    }
    auto docs = WARREN_TRY(state_->ListDocs(kTokenKind));
    std::map<std::string, Principal> by_hash;
    std::map<std::string, json> records;
    for (const json& r : docs) {
      by_hash[r.value("sha256", "")] = FromRecord(r);
      json shown = r;
      shown.erase("sha256");
      records[r.value("name", "")] = shown;
    }
    MutexLock lock(&mu_);
    if (writes_ != before) continue;
    by_hash_.swap(by_hash);
    records_.swap(records);
    return Status::Ok();
  }
  return Status::Ok();
}

std::optional<Principal> TokenRegistry::Authenticate(std::string_view header) const {
  if (BearerMatches(header, admin_token_)) return Principal{"admin", {"admin"}, {}};
  if (header.size() <= kBearer.size() || header.substr(0, kBearer.size()) != kBearer)
    return std::nullopt;
  std::string hash = Sha256Hex(header.substr(kBearer.size()));
  {
    MutexLock lock(&mu_);
    auto it = by_hash_.find(hash);
    if (it != by_hash_.end()) return it->second;
    if (!reload_on_miss_) return std::nullopt;
  }
  // A token made through another API server a moment ago: read the store again, unless a
  // reading began after this request arrived (concurrent misses share one); at most 20 a
  // second (unknown tokens must not turn into a read per request: they wait instead).
  const auto arrived = std::chrono::steady_clock::now();
  {
    MutexLock queue(&miss_mu_);
    if (last_miss_reload_ < arrived) {
      std::this_thread::sleep_until(last_miss_reload_ + std::chrono::milliseconds(50));
      last_miss_reload_ = std::chrono::steady_clock::now();
      if (Status st = Reload(); !st.ok()) {
        spdlog::warn("reload tokens: {}", st.ToString());
        return std::nullopt;
      }
    }
  }
  MutexLock lock(&mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

Result<json> TokenRegistry::Create(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return Invalid("token request must be a JSON object");
  static const char* kFields[] = {"name",          "scopes",      "max_sandboxes", "max_cpu",
                                  "max_memory_mb", "create_rate", "max_calls",     "call_rate"};
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (std::find_if(std::begin(kFields), std::end(kFields),
                     [&](const char* f) { return k == f; }) == std::end(kFields))
      return Invalid("unknown field `" + k + "` in token request");
  }
  if (!j.contains("name") || !j["name"].is_string() ||
      !ValidTokenName(j["name"].get<std::string>()))
    return Invalid("`name` must be 1-64 letters, digits, `.`, `-` or `_` (and not `admin`)");
  Principal p;
  p.name = j["name"].get<std::string>();
  if (j.contains("scopes") && !j["scopes"].is_null()) {
    if (!j["scopes"].is_array() || j["scopes"].empty())
      return Invalid("`scopes` must be a non-empty array");
    for (const auto& s : j["scopes"]) {
      if (!s.is_string() || std::find(KnownScopes().begin(), KnownScopes().end(),
                                      s.get<std::string>()) == KnownScopes().end()) {
        std::string known;
        for (const auto& k : KnownScopes()) known += (known.empty() ? "" : ", ") + k;
        return Invalid("unknown scope " + s.dump() + " (known: " + known + ")");
      }
      p.scopes.push_back(s.get<std::string>());
    }
  } else {
    p.scopes = DefaultScopes();
  }
  auto num = [&](const char* k, double max, double* out) -> Status {
    if (!j.contains(k) || j[k].is_null()) return Status::Ok();
    if (!j[k].is_number() || j[k].get<double>() < 0 || j[k].get<double>() > max ||
        std::isnan(j[k].get<double>()))
      return Invalid(std::string("`") + k + "` must be a number from 0 (unlimited) to " +
                     std::to_string(static_cast<int64_t>(max)));
    *out = j[k].get<double>();
    return Status::Ok();
  };
  double ms = 0, mc = 0, mm = 0, cr = 0, mcalls = 0, crate = 0;
  WARREN_RETURN_IF_ERROR(num("max_sandboxes", 1e6, &ms));
  WARREN_RETURN_IF_ERROR(num("max_cpu", 1e5, &mc));
  WARREN_RETURN_IF_ERROR(num("max_memory_mb", 1e9, &mm));
  WARREN_RETURN_IF_ERROR(num("create_rate", 1e6, &cr));
  WARREN_RETURN_IF_ERROR(num("max_calls", 1e6, &mcalls));
  WARREN_RETURN_IF_ERROR(num("call_rate", 1e6, &crate));
  p.quotas = {static_cast<int64_t>(ms),     mc,   static_cast<int64_t>(mm), cr,
              static_cast<int64_t>(mcalls), crate};

  std::string token = "wt_" + RandomHex(24);
  json rec = {{"name", p.name},
              {"scopes", p.scopes},
              {"quotas", p.quotas.ToJson()},
              {"created_at", NowRfc3339()}};
  MutexLock lock(&mu_);
  if (records_.count(p.name))
    return Status(Code::kConflict, "create token", p.name, "a token with this name exists");
  json stored = rec;
  stored["sha256"] = Sha256Hex(token);
  WARREN_RETURN_IF_ERROR(state_->PutDoc(kTokenKind, p.name, stored));
  by_hash_[stored["sha256"].get<std::string>()] = p;
  records_[p.name] = rec;
  ++writes_;
  rec["token"] = token;
  return rec;
}

json TokenRegistry::List() const {
  MutexLock lock(&mu_);
  json arr = json::array();
  for (const auto& [n, r] : records_) arr.push_back(r);
  return {{"tokens", arr}};
}

Status TokenRegistry::Remove(const std::string& name) {
  {
    // One made through another API server a moment ago: read the store again first.
    MutexLock lock(&mu_);
    const bool reread = !records_.count(name) && reload_on_miss_;
    lock.Unlock();
    if (reread) WARREN_RETURN_IF_ERROR(Reload());
  }
  MutexLock lock(&mu_);
  if (!records_.count(name)) return NotFound("token", name);
  WARREN_RETURN_IF_ERROR(state_->RemoveDoc(kTokenKind, name));
  ++writes_;
  records_.erase(name);
  for (auto it = by_hash_.begin(); it != by_hash_.end();)
    it = it->second.name == name ? by_hash_.erase(it) : std::next(it);
  return Status::Ok();
}

}  // namespace warren::server
