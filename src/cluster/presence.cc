#include "cluster/presence.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "base/ids.h"
#include "cluster/keys.h"

namespace warren::cluster {

Presence::Presence(KvStore* kv, std::string name, int64_t ttl_s)
    : kv_(kv), name_(std::move(name)), ttl_s_(ttl_s) {}

Presence::~Presence() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (lease_.load() != 0) (void)kv_->RevokeLease(lease_.load());
}

Status Presence::Register() {
  const int64_t lease = WARREN_TRY(kv_->GrantLease(ttl_s_));
  lease_.store(lease);
  const std::string doc = nlohmann::json{{"started_at", NowRfc3339()}}.dump();
  return kv_->Put(keys::ApiServer(name_), doc, lease).status();
}

Status Presence::Start() {
  WARREN_RETURN_IF_ERROR(Register().Context("register API server " + name_));
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void Presence::Loop() {
  // Keepalives at a third of the TTL: two can be lost before the lease expires.
  const auto every = std::chrono::milliseconds(ttl_s_ * 1000 / 3);
  for (;;) {
    {
      MutexLock lock(&mu_);
      const auto until = std::chrono::steady_clock::now() + every;
      while (!stop_ && std::chrono::steady_clock::now() < until) lock.WaitUntil(wake_, until);
      if (stop_) return;
    }
    auto kept = kv_->KeepAlive(lease_.load());
    if (kept.ok()) continue;
    if (kept.status().code() != Code::kNotFound) {
      spdlog::warn("API server {}: keepalive: {}", name_, kept.status().ToString());
      continue;
    }
    // Expired while we could not reach etcd: the others took us for gone (and cleaned up our
    // half-made creates, which then fail here). Come back.
    spdlog::warn("API server {}: lease expired; registering again", name_);
    if (Status st = Register(); !st.ok())
      spdlog::warn("API server {}: register: {}", name_, st.ToString());
  }
}

}  // namespace warren::cluster
