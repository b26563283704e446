#include "server/leases.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "base/ids.h"
#include "server/state_store.h"

namespace warren::server {

using nlohmann::json;

namespace {
constexpr const char* kLeaseKind = "lease";
constexpr double kMaxTtl = 7 * 86400;
constexpr double kDefaultTtl = 60;

json Public(const json& doc) {
  json out = doc;
  out.erase("expires_unix");
  return out;
}
}  // namespace

void LeaseTable::Load() {
  MutexLock lock(&mu_);
  auto docs = state_->ListDocs(kLeaseKind);
  if (!docs.ok()) {
    spdlog::error("load leases: {}", docs.status().ToString());
    return;
  }
  for (const json& d : *docs) leases_[d.value("id", "")] = d;
}

Result<double> LeaseTable::ParseTtl(const std::string& body, double fallback) {
  if (body.empty()) return fallback;
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return Invalid("lease request must be a JSON object");
  for (auto& [k, v] : j.items())
    if (k != "ttl_s") return Invalid("unknown field `" + k + "` in lease request");
  if (!j.contains("ttl_s") || j["ttl_s"].is_null()) return fallback;
  if (!j["ttl_s"].is_number() || std::isnan(j["ttl_s"].get<double>()) ||
      j["ttl_s"].get<double>() < 1 || j["ttl_s"].get<double>() > kMaxTtl)
    return Invalid("`ttl_s` must be a number of seconds from 1 to " + std::to_string(int(kMaxTtl)));
  return j["ttl_s"].get<double>();
}

Result<json> LeaseTable::Create(const Principal& who, const std::string& body) {
  double ttl = WARREN_TRY(ParseTtl(body, kDefaultTtl));
  const double now = UnixNow();
  json doc = {{"id", "ls-" + RandomHex(8)},
              {"owner", who.name},
              {"ttl_s", ttl},
              {"created_at", Rfc3339(now)},
              {"expires_at", Rfc3339(now + ttl)},
              {"expires_unix", now + ttl}};
  MutexLock lock(&mu_);
  WARREN_RETURN_IF_ERROR(state_->PutDoc(kLeaseKind, doc["id"], doc));
  leases_[doc["id"]] = doc;
  return Public(doc);
}

void LeaseTable::SetShared(bool shared) {
  MutexLock lock(&mu_);
  shared_ = shared;
}

void LeaseTable::Refresh(const std::string& id) {
  if (!shared_) return;
  auto doc = state_->GetDoc(kLeaseKind, id);
  if (doc.ok())
    leases_[id] = *doc;
  else if (doc.status().code() == Code::kNotFound)
    leases_.erase(id);  // released or expired through another replica
}

void LeaseTable::NoteLost(const std::string& id, const std::string& sandbox_id) {
  MutexLock lock(&mu_);
  // Another replica may note another sandbox of the same lease at once (a whole node is lost
  // at a time): write, read back, and write again until the id is there.
  for (int attempt = 0; attempt < 8; ++attempt) {
    Refresh(id);
    auto it = leases_.find(id);
    if (it == leases_.end()) return;  // released or expired: no holder to tell
    json& lost = it->second["lost"];
    if (!lost.is_array()) lost = json::array();
    for (const auto& s : lost)
      if (s == sandbox_id) return;
    lost.push_back(sandbox_id);
    if (lost.size() > 1000) lost.erase(lost.begin());
    if (Status st = state_->PutDoc(kLeaseKind, id, it->second); !st.ok()) {
      spdlog::warn("lease {}: noting lost sandbox {}: {}", id, sandbox_id, st.ToString());
      return;
    }
    if (!shared_) return;
  }
}

Result<json> LeaseTable::Renew(const Principal& who, const std::string& id,
                               const std::string& body) {
  MutexLock lock(&mu_);
  Refresh(id);
  auto it = leases_.find(id);
  const double now = UnixNow();
  if (it == leases_.end() || !who.Owns(it->second.value("owner", "")) ||
      it->second.value("expires_unix", 0.0) <= now)
    return NotFound("lease", id);
  double ttl = WARREN_TRY(ParseTtl(body, it->second.value("ttl_s", kDefaultTtl)));
  json doc = it->second;
  doc["ttl_s"] = ttl;
  doc["expires_unix"] = now + ttl;
  doc["expires_at"] = Rfc3339(now + ttl);
  WARREN_RETURN_IF_ERROR(state_->PutDoc(kLeaseKind, id, doc));
  it->second = doc;
  return Public(doc);
}

Status LeaseTable::Release(const Principal& who, const std::string& id) {
  MutexLock lock(&mu_);
  Refresh(id);
  auto it = leases_.find(id);
  if (it == leases_.end() || !who.Owns(it->second.value("owner", "")) ||
      it->second.value("expires_unix", 0.0) <= UnixNow())
    return NotFound("lease", id);  // an expired one is the reaper's (it applies the action)
  WARREN_RETURN_IF_ERROR(state_->RemoveDoc(kLeaseKind, id));
  leases_.erase(it);
  return Status::Ok();
}

Result<json> LeaseTable::Get(const Principal& who, const std::string& id) {
  MutexLock lock(&mu_);
  Refresh(id);
  auto it = leases_.find(id);
  if (it == leases_.end() || !who.Owns(it->second.value("owner", "")) ||
      it->second.value("expires_unix", 0.0) <= UnixNow())
    return NotFound("lease", id);
  return Public(it->second);
}

std::vector<std::string> LeaseTable::TakeExpired() {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  const double now = UnixNow();
  if (shared_) {
    // Every replica's leases, as stored: one renewed through another replica has a later
    // expiry there than here, one made there is not here at all.
    auto docs = state_->ListDocs(kLeaseKind);
    if (!docs.ok()) return out;  // unreadable: expire nothing rather than on stale expiries
    leases_.clear();
    for (const json& d : *docs) leases_[d.value("id", "")] = d;
  }
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.value("expires_unix", 0.0) <= now) {
      // Whoever removes the stored lease applies its expiry: once, across replicas.
      Status removed = state_->RemoveDoc(kLeaseKind, it->first);
      if (removed.ok() || !shared_) out.push_back(it->first);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

}  // namespace warren::server
