#include "cluster/membership.h"

#include <spdlog/spdlog.h>

#include "cluster/keys.h"

namespace warren::cluster {

using nlohmann::json;

// ---- NodeHeartbeat ----

NodeHeartbeat::NodeHeartbeat(KvStore* kv, int64_t ttl_s, std::function<NodeRecord()> snapshot,
                             int publish_every_ms)
    : kv_(kv), ttl_s_(ttl_s), snapshot_(std::move(snapshot)), publish_every_ms_(publish_every_ms) {}

NodeHeartbeat::~NodeHeartbeat() { Stop(false); }

Status NodeHeartbeat::Register() {
  auto lease = kv_->GrantLease(ttl_s_);
  if (!lease.ok()) return lease.status();
  lease_.store(*lease);
  published_.clear();
  WARREN_RETURN_IF_ERROR(Publish(true));
  registered_.store(true);
  return Status::Ok();
}

Status NodeHeartbeat::Publish(bool force) {
  const NodeRecord rec = snapshot_();
  std::string doc = ToJson(rec).dump();
  if (!force && doc == published_) return Status::Ok();
  auto r = kv_->Put(keys::Node(rec.name), doc, lease_.load());
  if (!r.ok()) return r.status();
  published_ = std::move(doc);
  return Status::Ok();
}

Status NodeHeartbeat::Start() {
  WARREN_RETURN_IF_ERROR(Register());
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void NodeHeartbeat::Poke() {
  MutexLock lock(&mu_);
  poked_ = true;
  wake_.notify_all();
}

void NodeHeartbeat::Stop(bool leave) {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (leave && lease_.load() != 0) {
    Status st = kv_->RevokeLease(lease_.load());
    if (!st.ok()) spdlog::warn("node leaving the cluster: {}", st.ToString());
  }
  registered_.store(false);
}

void NodeHeartbeat::Loop() {
  using Clock = std::chrono::steady_clock;
  // Keepalives at a third of the TTL: two can be lost before the lease expires.
  const auto keepalive_every = std::chrono::milliseconds(ttl_s_ * 1000 / 3);
  const auto publish_every = std::chrono::milliseconds(publish_every_ms_);
  auto next_keepalive = Clock::now() + keepalive_every;
  auto next_publish = Clock::now() + publish_every;
  for (;;) {
    bool poked = false;
    {
      MutexLock lock(&mu_);
      const auto until = std::min(next_keepalive, next_publish);
      while (!stop_ && !poked_ && Clock::now() < until) lock.WaitUntil(wake_, until);
      if (stop_) return;
      poked = poked_;
      poked_ = false;
    }
    const auto now = Clock::now();
    if (!registered_.load()) {
      // The lease expired (or was never renewed in time): join again, as a node coming back.
      Status st = Register();
      if (!st.ok())
        spdlog::warn("node heartbeat: rejoining: {}", st.ToString());
      else
        spdlog::info("node heartbeat: joined again with lease {}", lease_.load());
      if (st.ok() && on_rejoin_) on_rejoin_();
      next_keepalive = now + keepalive_every;
      next_publish = now + publish_every;
      continue;
    }
    if (now >= next_keepalive) {
      next_keepalive = now + keepalive_every;
      auto ttl = kv_->KeepAlive(lease_.load());
      if (!ttl.ok()) {
        if (ttl.status().code() == Code::kNotFound) {
          spdlog::warn("node heartbeat: lease {} expired; joining again", lease_.load());
          registered_.store(false);
          continue;
        }
        // etcd unreachable: sandboxes keep running; keep trying, sooner.
        spdlog::warn("node heartbeat: {}", ttl.status().ToString());
        next_keepalive = now + std::chrono::milliseconds(500);
      }
    }
    if (poked || now >= next_publish) {
      next_publish = now + publish_every;
      Status st = Publish(false);
      if (!st.ok()) {
        if (st.code() == Code::kNotFound) registered_.store(false);  // the lease is gone
        spdlog::warn("node heartbeat: publishing the node's record: {}", st.ToString());
      }
    }
  }
}

// ---- NodeDirectory ----

NodeDirectory::NodeDirectory(KvStore* kv) : kv_(kv) {}

NodeDirectory::~NodeDirectory() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    relist_cv_.notify_all();
  }
  if (relister_.joinable()) relister_.join();
  MutexLock lock(&watch_mu_);
  watch_.reset();
}

void NodeDirectory::SetOnNodeGone(std::function<void(const std::string&)> gone) {
  gone_ = std::move(gone);
}

std::string NodeDirectory::ApplyLocked(const std::string& key, const std::string* value,
                                       int64_t mod_revision) {
  std::string name, what;
  if (!keys::SplitNodeKey(key, &name, &what)) return "";
  json j = value ? json::parse(*value, nullptr, false) : json();
  if (what == "record") {
    if (!value) return nodes_.erase(name) ? name : "";
    auto rec = ParseNodeRecord(j);
    if (!rec.ok()) {
      spdlog::warn("node directory: {}: {}", key, rec.status().ToString());
      return "";
    }
    nodes_[name] = std::move(*rec);
  } else if (what == "admin") {
    if (!value) {
      admin_.erase(name);
      return "";
    }
    auto a = ParseNodeAdmin(j);
    if (a.ok())
      admin_[name] = *a;
    else
      spdlog::warn("node directory: {}: {}", key, a.status().ToString());
  } else if (what == "alloc") {
    if (!value) {
      alloc_.erase(name);
      return "";
    }
    auto a = ParseAllocation(j);
    if (!a.ok()) {
      spdlog::warn("node directory: {}: {}", key, a.status().ToString());
      return "";
    }
    // This replica's own reservations may have been noted already (NoteAllocation).
    auto& [alloc, rev] = alloc_[name];
    if (mod_revision >= rev) {
      alloc = *a;
      rev = mod_revision;
    }
  }
  return "";
}

Status NodeDirectory::Load() {
  auto all = kv_->List(keys::kNodes);
  if (!all.ok()) return all.status();
  std::vector<std::string> went;
  {
    MutexLock lock(&mu_);
    std::map<std::string, NodeRecord> before;
    before.swap(nodes_);
    admin_.clear();
    alloc_.clear();
    for (const KeyValue& kv : all->kvs) ApplyLocked(kv.key, &kv.value, kv.mod_revision);
    for (const auto& [name, rec] : before)
      if (!nodes_.count(name)) went.push_back(name);
  }
  for (const auto& name : went)
    if (gone_) gone_(name);
  auto w = kv_->WatchRange(keys::kNodes, PrefixEnd(keys::kNodes), all->revision + 1,
                           {[this](const std::vector<WatchEvent>& evs) { OnEvents(evs); },
                            [this](const Status& st) { OnEnd(st); }});
  if (!w.ok()) return w.status();
  MutexLock lock(&watch_mu_);
  watch_ = std::move(*w);
  return Status::Ok();
}

Status NodeDirectory::Start() {
  WARREN_RETURN_IF_ERROR(Load());
  relister_ = std::thread([this] { Relister(); });
  return Status::Ok();
}

void NodeDirectory::OnEvents(const std::vector<WatchEvent>& events) {
  std::vector<std::string> went;
  {
    MutexLock lock(&mu_);
    for (const WatchEvent& e : events) {
      std::string gone = ApplyLocked(
          e.kv.key, e.type == WatchEvent::Type::kPut ? &e.kv.value : nullptr, e.kv.mod_revision);
      if (!gone.empty()) went.push_back(gone);
    }
  }
  for (const auto& name : went) {
    spdlog::warn("node {} left the cluster (its lease ended)", name);
    if (gone_) gone_(name);
  }
}

void NodeDirectory::OnEnd(const Status& st) {
  spdlog::warn("node directory: {}; listing again", st.ToString());
  MutexLock lock(&mu_);
  relist_ = true;
  relist_cv_.notify_all();
}

void NodeDirectory::Relister() {
  MutexLock lock(&mu_);
  while (!stop_) {
    if (!relist_) {
      lock.Wait(relist_cv_);
      continue;
    }
    relist_ = false;
    lock.Unlock();
    Status st = Load();
    lock.Lock();
    if (!st.ok()) {
      spdlog::warn("node directory: listing: {}", st.ToString());
      relist_ = true;
      lock.WaitFor(relist_cv_, std::chrono::seconds(1));
    }
  }
}

std::vector<NodeView> NodeDirectory::Ready() const {
  MutexLock lock(&mu_);
  std::vector<NodeView> out;
  out.reserve(nodes_.size());
  for (const auto& [name, rec] : nodes_) {
    NodeView v{rec, {}, {}};
    if (auto a = admin_.find(name); a != admin_.end()) v.admin = a->second;
    if (auto a = alloc_.find(name); a != alloc_.end()) v.alloc = a->second.first;
    out.push_back(std::move(v));
  }
  return out;
}

std::optional<NodeView> NodeDirectory::Get(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  NodeView v{it->second, {}, {}};
  if (auto a = admin_.find(name); a != admin_.end()) v.admin = a->second;
  if (auto a = alloc_.find(name); a != alloc_.end()) v.alloc = a->second.first;
  return v;
}

void NodeDirectory::NoteAdmin(const std::string& name, const NodeAdmin& admin) {
  MutexLock lock(&mu_);
  admin_[name] = admin;
}

void NodeDirectory::NoteAllocation(const std::string& name, const Allocation& alloc,
                                   int64_t mod_revision) {
  MutexLock lock(&mu_);
  auto& [have, rev] = alloc_[name];
  if (mod_revision > rev) {
    have = alloc;
    rev = mod_revision;
  }
}

std::optional<std::pair<Allocation, int64_t>> NodeDirectory::AllocationOf(
    const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = alloc_.find(name);
  if (it == alloc_.end() || it->second.second <= 0) return std::nullopt;
  return it->second;
}

std::vector<std::string> NodeDirectory::Known() const {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, a] : admin_)
    if (!nodes_.count(name)) out.push_back(name);
  for (const auto& [name, a] : alloc_)
    if (!nodes_.count(name) && !admin_.count(name)) out.push_back(name);
  return out;
}

}  // namespace warren::cluster
