#include "server/routes.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/cleanup.h"
#include "base/ids.h"
#include "base/utf8.h"
#include "net/policy.h"

namespace warren::server {

using nlohmann::json;

void Histogram::Observe(double s) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < std::size(kBuckets); ++i)
    if (s <= kBuckets[i]) ++counts_[i];
  ++total_;
  sum_ += s;
}

std::string Histogram::Render(const std::string& name) const {
  MutexLock lock(&mu_);
  std::ostringstream o;
  o << "# TYPE " << name << " histogram\n";
  for (size_t i = 0; i < std::size(kBuckets); ++i)
    o << name << "_bucket{le=\"" << kBuckets[i] << "\"} " << counts_[i] << "\n";
  o << name << "_bucket{le=\"+Inf\"} " << total_ << "\n";
  o << name << "_sum " << sum_ << "\n" << name << "_count " << total_ << "\n";
  return o.str();
}

namespace {
constexpr int64_t kBatchWorkers = 4;
// The daemon's own actions (TTL reaping) act with the admin's rights.
const Principal& System() {
  static const Principal p{"admin", {"admin"}, {}};
  return p;
}
}  // namespace

Api::Api(StateStore* state, StateStore* durable, node::NodeApi* node, image::LayerStore* layers,
         TokenRegistry* tokens)
    : state_(state),
      sandboxes_(state),
      node_(node),
      layers_(layers),
      tokens_(tokens),
      leases_(state),
      traj_(durable) {
  quota_.Count(sandboxes_.List());
  leases_.Load();
  node_->SetOnSandboxLost([this](const std::string& id) {
    auto sb = sandboxes_.Transition(
        id, SandboxState::kFailed, {SandboxState::kRunning}, [](SandboxRecord& r) {
          r.error = SandboxRecord::Error{"internal", "the sandbox's init process exited"};
        });
    if (sb.ok()) ReleaseQuotaOf(*sb);
  });
}

Api::~Api() { StopReaper(); }

void Api::StartReaper() {
  reaper_ = std::thread([this] {
    MutexLock lock(&reap_mu_);
    while (!reap_stop_) {
      lock.WaitFor(reap_cv_, std::chrono::milliseconds(500));
      double now = NowSeconds();
      std::vector<std::string> due, idle;
      for (auto& [id, deadline] : deadlines_)
        if (deadline <= now) due.push_back(id);
      for (auto& [id, i] : idle_)
        if (now - i.last >= i.timeout) idle.push_back(id);
      lock.Unlock();
      // Idle: no API use for idle_timeout_s and no command running.
      for (const auto& id : idle) {
        if (node_->RunningExecs(id) > 0) {
          Touch(id);
          continue;
        }
        spdlog::info("sandbox {} idle for its idle_timeout_s: deleting", id);
        if (!std::count(due.begin(), due.end(), id)) due.push_back(id);
      }
      for (const auto& lease : leases_.TakeExpired()) ExpireLease(lease);
      for (const auto& id : due) {
        Status st = DeleteSandbox(System(), id);
        if (!st.ok() && st.code() != Code::kNotFound) CountError(st.code());
        MutexLock l(&reap_mu_);
        deadlines_.erase(id);
        idle_.erase(id);
      }
      lock.Lock();
    }
  });
}

void Api::StopReaper() {
  {
    MutexLock lock(&reap_mu_);
    reap_stop_ = true;
  }
  reap_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

void Api::ReleaseQuotaOf(const SandboxRecord& sb) {
  quota_.ReleaseHeld(sb.id, sb.owner, sb.spec.cpu, static_cast<int64_t>(sb.spec.memory_mb));
}

void Api::Touch(const std::string& id) {
  MutexLock lock(&reap_mu_);
  auto it = idle_.find(id);
  if (it != idle_.end()) it->second.last = NowSeconds();
}

void Api::MarkAllStopped() {
  for (const SandboxRecord& sb : sandboxes_.List()) {
    if (sb.state == SandboxState::kFailed) continue;
    (void)sandboxes_.Transition(sb.id, SandboxState::kFailed, {}, [](SandboxRecord& r) {
      r.error = SandboxRecord::Error{"unavailable",
                                     "warren serve was stopped; its sandboxes were deleted"};
    });
  }
}

// The node spec of a fncall sandbox from its record (a fncall sandbox is only its record).
static node::NodeSandboxSpec FncallSpecOf(const SandboxRecord& sb) {
  node::NodeSandboxSpec ns;
  ns.backend = runtime::BackendKind::kFncall;
  ns.config.id = sb.id;
  for (const auto& l : sb.layers) ns.config.layers.push_back({l.digest, ""});
  ns.config.memory_bytes = sb.spec.memory_mb << 20;
  ns.config.disk_bytes = sb.spec.disk_mb << 20;
  ns.config.pids = sb.spec.pids;
  ns.config.open_files = sb.spec.open_files;
  ns.config.env = sb.spec.env;
  return ns;
}

void Api::ReconcileAfterRestart() {
  const double wall = UnixNow(), mono = NowSeconds();
  for (const SandboxRecord& sb : sandboxes_.List()) {
    const std::string& id = sb.id;
    const std::string state = StateName(sb.state);
    if (sb.state == SandboxState::kFailed) continue;
    if (sb.state == SandboxState::kStopping) {
      // A delete the earlier daemon did not finish: its processes go with the unadopted
      // ones (ReapUnadopted), its record goes now.
      (void)sandboxes_.Remove(id);
      ReleaseQuotaOf(sb);
      continue;
    }
    // Running and paused sandboxes kept running while we were away: take them over. A fncall
    // sandbox has no processes between execs: it is simply made again.
    Status st = IsLive(sb.state) ? (sb.spec.backend == runtime::BackendKind::kFncall
                                        ? node_->CreateSandbox(FncallSpecOf(sb)).status()
                                        : node_->AdoptSandbox(id))
                                 : Status(Code::kUnavailable, "adopt", id,
                                          "it was " + state + " when warren serve stopped");
    if (st.ok()) {
      spdlog::info("re-adopted sandbox {} ({})", id, state);
      // Its TTL runs from its creation, on the wall clock.
      double created = ParseRfc3339(sb.created_at);
      const double ttl = static_cast<double>(sb.spec.ttl_s);
      double left = created > 0 ? created + ttl - wall : ttl;
      MutexLock lock(&reap_mu_);
      deadlines_[id] = mono + std::max(0.0, left);
      if (sb.spec.idle_timeout_s) idle_[id] = {static_cast<double>(*sb.spec.idle_timeout_s), mono};
      continue;
    }
    spdlog::warn("sandbox {} could not be re-adopted: {}", id, st.ToString());
    (void)sandboxes_.Transition(id, SandboxState::kFailed, {}, [&](SandboxRecord& r) {
      r.error = SandboxRecord::Error{
          "unavailable",
          "warren serve restarted and could not take the sandbox over: " + st.ToString()};
    });
    ReleaseQuotaOf(sb);
  }
}

void Api::CountError(Code code) {
  MutexLock lock(&err_mu_);
  ++errors_[CodeName(code)];
}

Result<json> Api::CreateOne(const Principal& who, const SandboxSpec& spec, bool reserved) {
  double t0 = NowSeconds();
  // The quota share: taken here, or already by the batch (in item order); given back unless a
  // sandbox ends up holding it.
  Cleanup release(
      [&] { quota_.Release(who.name, spec.cpu, static_cast<int64_t>(spec.memory_mb)); });
  if (!reserved) release.Cancel();
  if (spec.backend == runtime::BackendKind::kFncall && !calls_)
    return Status(Code::kUnavailable, "create sandbox", "fncall", "not enabled on this server");
  if (spec.lease && !leases_.Get(who, *spec.lease).ok())
    return Invalid("unknown or expired lease `" + *spec.lease + "`");

  // A trainer that comes back after preemption asks for its trajectory's sandbox again: it
  // gets the live one (with all the effects of the steps it will replay), not a new one.
  // Creates of one trajectory are serialized, so concurrent ones cannot make two sandboxes.
  std::unique_lock traj_lock(traj_create_mu_, std::defer_lock);
  if (spec.trajectory) {
    traj_lock.lock();
    for (SandboxRecord& sb : sandboxes_.List())
      if (sb.spec.trajectory == spec.trajectory && sb.owner == who.name && IsLive(sb.state))
        return Reattach(who, spec, std::move(sb));
  }

  // Resolve NAME:TAG to digests, top layer first: workspace, tools, base. The sandbox records
  // the digests: tags move, what it was made from does not.
  std::shared_lock gc_lock(gc_mu_);
  node::NodeSandboxSpec ns;
  std::vector<SandboxRecord::Layer> made_from;
  auto resolve = [&](const std::string& ref, const char* role) -> Status {
    std::string name, tag;
    WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
    auto rec = state_->GetLayer(name, tag);
    if (!rec.ok()) return Invalid(std::string("unknown ") + role + " image `" + ref + "`");
    ns.config.layers.push_back({rec->digest, "", std::string(role) == "tool"});
    made_from.push_back({ref, role, rec->digest});
    return Status::Ok();
  };
  if (spec.workspace) WARREN_RETURN_IF_ERROR(resolve(*spec.workspace, "workspace"));
  for (const auto& t : spec.tools) WARREN_RETURN_IF_ERROR(resolve(t, "tool"));
  WARREN_RETURN_IF_ERROR(resolve(spec.image, "base"));

  if (!reserved) {
    WARREN_RETURN_IF_ERROR(quota_.Reserve(who, spec.cpu, static_cast<int64_t>(spec.memory_mb)));
    release =
        Cleanup([&] { quota_.Release(who.name, spec.cpu, static_cast<int64_t>(spec.memory_mb)); });
  }
  const std::string id = NewSandboxId();
  ns.backend = spec.backend;
  ns.config.id = id;
  ns.config.hostname = id;
  ns.config.memory_bytes = spec.memory_mb << 20;
  ns.config.disk_bytes = spec.disk_mb << 20;
  ns.config.pids = spec.pids;
  ns.config.open_files = spec.open_files;
  ns.config.cpus = spec.cpu;
  ns.config.env = spec.env;
  ns.network = WARREN_TRY(net::ParsePolicy(spec.network.mode, spec.network.allow));

  SandboxRecord sb;
  sb.id = id;
  sb.owner = who.name;
  sb.node = node_->name();
  sb.created_at = NowRfc3339();
  sb.state = SandboxState::kCreating;
  sb.spec = spec;
  sb.layers = std::move(made_from);
  WARREN_RETURN_IF_ERROR(sandboxes_.Insert(sb));
  auto rt = node_->CreateSandbox(ns);
  gc_lock.unlock();  // mounted: the kernel holds the blobs open now
  if (!rt.ok()) {
    (void)sandboxes_.Remove(id);
    return node::NodeFault(rt.status());
  }
  // The filesystem policy holds before anything of the occupant's runs.
  if (!spec.filesystem.empty()) {
    Status fs = node::NodeFault(node_->SetFilesystem(id, spec.filesystem));
    if (!fs.ok()) {
      (void)node_->DeleteSandbox(id);
      (void)sandboxes_.Remove(id);
      return fs;
    }
  }
  auto running = sandboxes_.Transition(id, SandboxState::kRunning, {SandboxState::kCreating});
  if (!running.ok()) {
    (void)node_->DeleteSandbox(id);
    (void)sandboxes_.Remove(id);
    return running.status();
  }
  sb = std::move(*running);
  release.Cancel();  // the sandbox holds its share until deleted (or failed)
  quota_.Hold(id);
  // The lease may have expired while we were creating: then this sandbox goes with it now.
  if (spec.lease && !leases_.Get(who, *spec.lease).ok()) ExpireLease(*spec.lease);
  create_seconds_.Observe(NowSeconds() - t0);
  if (spec.trajectory) traj_.Restart(TrajectoryLog::Key(who.name, *spec.trajectory));
  {
    MutexLock lock(&reap_mu_);
    deadlines_[id] = NowSeconds() + static_cast<double>(spec.ttl_s);
    if (spec.idle_timeout_s) idle_[id] = {static_cast<double>(*spec.idle_timeout_s), NowSeconds()};
  }
  return ToJson(sb);
}

// The trainer is back: its sandbox takes the lease of the new request (the old one belonged to
// the trainer that died) and runs again if its lease expiry had paused it.
Result<json> Api::Reattach(const Principal& who, const SandboxSpec& spec, SandboxRecord sb) {
  const std::string id = sb.id;
  if (spec.lease) {
    sb = WARREN_TRY(sandboxes_.Update(id, [&](SandboxRecord& r) {
      r.spec.lease = spec.lease;
      r.spec.on_lease_expiry = spec.on_lease_expiry;
      return Status::Ok();
    }));
  }
  json out = ToJson(sb);
  if (sb.state == SandboxState::kPaused) out = WARREN_TRY(SetPaused(who, id, false));
  traj_.Restart(TrajectoryLog::Key(sb.owner, *spec.trajectory));
  return out;
}

Result<json> Api::CreateSandbox(const Principal& who, const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  SandboxSpec spec = WARREN_TRY(ParseSandboxSpec(j));
  return CreateOne(who, spec);
}

Result<json> Api::CreateBatch(const Principal& who, const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  if (!j.is_object()) return Invalid("batch request must be an object {count, spec}");
  for (auto& [k, v] : j.items())
    if (k != "count" && k != "spec") return Invalid("unknown field `" + k + "` in batch request");
  if (!j.contains("count") || !j["count"].is_number_integer() || j["count"].get<int64_t>() < 1 ||
      j["count"].get<int64_t>() > 10000)
    return Invalid("`count` must be an integer from 1 to 10000");
  SandboxSpec spec = WARREN_TRY(ParseSandboxSpec(j.value("spec", json::object())));
  json out = {{"sandboxes", json::array()}, {"errors", json::array()}};
  int64_t n = j["count"].get<int64_t>();
  if (spec.trajectory && n > 1)
    return Invalid("a trajectory belongs to one sandbox: `count` must be 1");
  // A few creates at once: each spends much of its time waiting (clone, the agent's setup),
  // so the batch goes faster than one by one, without flooding the host.
  // Quotas are taken in item order first, so a batch beyond a quota gets its first items.
  std::vector<Result<json>> results(static_cast<size_t>(n));
  std::vector<bool> reserved(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Status st = quota_.Reserve(who, spec.cpu, static_cast<int64_t>(spec.memory_mb));
    reserved[static_cast<size_t>(i)] = st.ok();
    if (!st.ok()) results[static_cast<size_t>(i)] = st;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;)
      if (reserved[static_cast<size_t>(i)])
        results[static_cast<size_t>(i)] = CreateOne(who, spec, true);
  };
  const int64_t workers = std::min<int64_t>(n, kBatchWorkers);
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (int64_t i = 0; i < n; ++i) {
    auto& r = results[static_cast<size_t>(i)];
    if (r.ok()) {
      out["sandboxes"].push_back(std::move(*r));
    } else {
      CountError(r.status().code());
      out["errors"].push_back(
          {{"index", i},
           {"error", {{"code", CodeName(r.status().code())}, {"message", r.status().ToString()}}}});
    }
  }
  return out;
}

Result<SandboxRecord> Api::Sandbox(const Principal& who, const std::string& id) {
  auto sb = sandboxes_.Get(id);
  if (!sb.ok() && sb.status().code() != Code::kNotFound) return sb.status();
  if (!sb.ok() || !who.Owns(sb->owner)) return NotFound("sandbox", id);
  // Any use of a sandbox through the API (get, exec, files, streams, pause) counts as
  // activity for its idle timeout; the daemon's own actions do not.
  if (&who != &System()) Touch(id);
  return sb;
}

Result<json> Api::GetSandbox(const Principal& who, const std::string& id) {
  return ToJson(WARREN_TRY(Sandbox(who, id)));
}

Result<json> Api::ListSandboxes(const Principal& who, const Query& q) {
  std::optional<SandboxState> want_state;
  std::vector<std::pair<std::string, std::string>> labels;
  for (auto& [k, v] : q) {
    if (k == "state") {
      // The contract's `deleted` is a state no record is in: it matches nothing.
      if (v == "deleted") return json{{"sandboxes", json::array()}};
      want_state = WARREN_TRY(ParseSandboxState(v));
    } else if (k == "label") {
      // Several label filters arrive joined by '&' in one value (see http_server.cc).
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, '&')) {
        size_t eq = item.find('=');
        if (eq == std::string::npos) return Invalid("label filter must be KEY=VALUE", item);
        labels.emplace_back(item.substr(0, eq), item.substr(eq + 1));
      }
    } else {
      return Invalid("unknown query parameter `" + k + "`");
    }
  }
  json out = json::array();
  for (const SandboxRecord& sb : sandboxes_.List()) {
    if (!who.Owns(sb.owner)) continue;
    if (want_state && sb.state != *want_state) continue;
    bool match = true;
    for (auto& [k, v] : labels)
      if (auto it = sb.spec.labels.find(k); it == sb.spec.labels.end() || it->second != v)
        match = false;
    if (match) out.push_back(ToJson(sb));
  }
  return json{{"sandboxes", out}};
}

Status Api::DeleteSandbox(const Principal& who, const std::string& id) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  // `stopping` while the node kills it: visible to readers, and if the daemon dies now the
  // next one finishes the deletion (ReconcileAfterRestart). A sandbox already stopping (a
  // delete under way, or one the earlier daemon left) is deleted again.
  if (sb.state == SandboxState::kCreating)
    return Status(Code::kConflict, "delete sandbox", id,
                  "sandbox is creating; delete it once its create returned");
  std::optional<SandboxState> was;
  if (IsLive(sb.state)) {
    WARREN_RETURN_IF_ERROR(sandboxes_
                               .Transition(id, SandboxState::kStopping,
                                           {SandboxState::kRunning, SandboxState::kPaused},
                                           [&](const SandboxRecord& r) { was = r.state; })
                               .status());
  }
  Status st = node_->DeleteSandbox(id);
  // A sandbox the node does not know (failed at a restart) only needs its record removed.
  if (!st.ok() && st.code() != Code::kNotFound) {
    if (was) (void)sandboxes_.Transition(id, *was, {SandboxState::kStopping});
    return node::NodeFault(st);
  }
  {
    MutexLock lock(&reap_mu_);
    deadlines_.erase(id);
    idle_.erase(id);
  }
  {
    MutexLock lock(&replayed_mu_);
    replay_stopped_.erase(id);
  }
  WARREN_RETURN_IF_ERROR(sandboxes_.Remove(id));
  ReleaseQuotaOf(sb);
  std::vector<std::string> digests;
  for (const auto& l : sb.layers) digests.push_back(l.digest);
  CollectBlobs(digests);
  return Status::Ok();
}

std::set<std::string> Api::DigestsInUse() {
  std::set<std::string> used;
  for (const auto& l : state_->ListLayers()) used.insert(l.digest);
  // From the stored JSON, not the typed records: a record this version cannot parse still
  // keeps its blobs.
  for (const json& sb : state_->ListSandboxes())
    if (sb.contains("layers") && sb["layers"].is_array())
      for (const auto& l : sb["layers"])
        if (l.is_object() && l.contains("digest") && l["digest"].is_string())
          used.insert(l["digest"].get<std::string>());
  return used;
}

void Api::CollectBlobs(const std::vector<std::string>& digests) {
  // The usual case is cheap: a digest some name still points at stays. Only the others need
  // the scan of every sandbox record (a delete of each of 1,000 sandboxes must not scan
  // 1,000 records each).
  std::vector<std::string> candidates;
  for (const auto& d : digests)
    if (!d.empty() && state_->LayerRefs(d) == 0) candidates.push_back(d);
  if (candidates.empty()) return;
  std::unique_lock lock(gc_mu_);
  std::set<std::string> used = DigestsInUse();
  for (const auto& d : candidates)
    if (!used.count(d)) {
      Status st = layers_->Remove(d);
      if (!st.ok()) spdlog::warn("garbage-collect blob: {}", st.ToString());
    }
}

void Api::SweepBlobs() {
  layers_->ClearTemp();
  std::unique_lock lock(gc_mu_);
  std::set<std::string> used = DigestsInUse();
  for (const auto& d : layers_->ListDigests())
    if (!used.count(d)) {
      spdlog::info("removing unreferenced layer blob {}", d);
      (void)layers_->Remove(d);
    }
}

Result<json> Api::SetPaused(const Principal& who, const std::string& id, bool paused) {
  const char* op = paused ? "pause" : "resume";
  const SandboxState from = paused ? SandboxState::kRunning : SandboxState::kPaused;
  const SandboxState to = paused ? SandboxState::kPaused : SandboxState::kRunning;
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state == to) return ToJson(sb);  // already there: a no-op
  if (sb.state != from)
    return Status(Code::kConflict, op, id, std::string("sandbox is ") + StateName(sb.state));
  WARREN_RETURN_IF_ERROR(
      node::NodeFault(paused ? node_->PauseSandbox(id) : node_->ResumeSandbox(id)));
  return ToJson(WARREN_TRY(sandboxes_.Transition(id, to, {from})));
}

Result<json> Api::SetNetwork(const Principal& who, const std::string& id, const std::string& body) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  json j = WARREN_TRY(ParseJsonBody(body));
  json spec = {{"image", "x:y"}, {"network", j}};
  SandboxSpec parsed = WARREN_TRY(ParseSandboxSpec(spec));
  net::Policy policy = WARREN_TRY(net::ParsePolicy(parsed.network.mode, parsed.network.allow));
  if (!IsLive(sb.state))
    return Status(Code::kConflict, "set network", id,
                  std::string("sandbox is ") + StateName(sb.state));
  WARREN_RETURN_IF_ERROR(node::NodeFault(node_->SetNetwork(id, policy)));
  return ToJson(WARREN_TRY(sandboxes_.Update(id, [&](SandboxRecord& r) {
    r.spec.network = parsed.network;
    return Status::Ok();
  })));
}

Result<json> Api::SetFilesystem(const Principal& who, const std::string& id,
                                const std::string& body) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  const isolation::FsPolicy policy = WARREN_TRY(ParseFsPolicy(WARREN_TRY(ParseJsonBody(body))));
  if (!IsLive(sb.state))
    return Status(Code::kConflict, "set filesystem policy", id,
                  std::string("sandbox is ") + StateName(sb.state));
  if (Status st = node::NodeFault(node_->SetFilesystem(id, policy)); !st.ok()) {
    // A refused policy changed nothing. Any other failure may have left the sandbox between
    // two policies: the one in force before is applied again.
    if (st.code() != Code::kInvalid) {
      Status back = node_->SetFilesystem(id, sb.spec.filesystem);
      if (!back.ok())
        spdlog::error("sandbox {}: its filesystem policy could not be restored: {}", id,
                      back.ToString());
    }
    return st;
  }
  return ToJson(WARREN_TRY(sandboxes_.Update(id, [&](SandboxRecord& r) {
    r.spec.filesystem = policy;
    return Status::Ok();
  })));
}

Result<json> Api::Changes(const Principal& who, const std::string& id, const Query& q) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  std::string under = "/";
  size_t limit = 10000;
  for (const auto& [k, v] : q) {
    if (k == "path") {
      auto p = isolation::NormalizeFsPolicy({{v}, {}});
      if (!p.ok()) return Invalid("`path` must be an absolute, normalized path");
      under = v;
    } else if (k == "limit") {
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(v) == 0 || std::stoul(v) > 100000)
        return Invalid("`limit` must be 1 to 100000");
      limit = std::stoul(v);
    } else {
      return Invalid("unknown query parameter `" + k + "`");
    }
  }
  if (!IsLive(sb.state))
    return Status(Code::kConflict, "read changes", id,
                  std::string("sandbox is ") + StateName(sb.state));
  auto changed = node_->Changes(id, under, limit);
  if (!changed.ok()) return node::NodeFault(changed.status());
  const isolation::ChangeReport& report = *changed;
  const auto& layers = sb.layers;
  json out = json::array();
  for (const auto& c : report.changes) {
    json e = {{"path", SanitizeUtf8(c.path)},
              {"change", isolation::ChangeKindName(c.kind)},
              {"type", isolation::EntryTypeName(c.type)},
              {"size", c.size},
              {"mode", c.mode}};
    // A name that is not UTF-8 is shown with U+FFFD, and given exactly in base64.
    if (e["path"].get<std::string>() != c.path) e["path_base64"] = Base64Encode(c.path);
    if (c.layer >= 0 && static_cast<size_t>(c.layer) < layers.size()) {
      const auto& l = layers[static_cast<size_t>(c.layer)];
      e["layer"] = {{"ref", l.ref}, {"role", l.role}, {"digest", l.digest}};
    }
    out.push_back(std::move(e));
  }
  return json{{"changes", std::move(out)}, {"truncated", report.truncated}};
}

Result<Api::ExecStart> Api::StartExec(const Principal& who, const std::string& id,
                                      const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  ExecRequest r = WARREN_TRY(ParseExecRequest(j));
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, "exec", id, std::string("sandbox is ") + StateName(sb.state));
  const bool recorded = sb.spec.trajectory.has_value();
  if (r.step && !recorded) return Invalid("`step` needs a sandbox created with a `trajectory`");
  node::ExecSpec es;
  es.argv = r.argv;  // copies: a trajectory step records the request too
  es.env = r.env;
  es.cwd = r.cwd;
  es.has_stdin = r.stdin_data.has_value();
  if (r.stdin_data) es.stdin_data = *r.stdin_data;
  es.timeout_ms = static_cast<int64_t>(r.timeout_s * 1000);
  es.max_output = r.max_output_bytes;
  es.binary = r.binary;
  if (recorded) return StartTrajectoryExec(sb, r, std::move(es));
  // Every exec's run time goes into warren_exec_seconds, however its result is fetched.
  es.on_record = [this](const std::shared_ptr<node::ExecRecord>& rec) {
    std::weak_ptr<node::ExecRecord> weak = rec;
    rec->SetFinisher([this, weak] {
      if (auto rec = weak.lock()) {
        ObserveExec(rec->run_seconds());
        rec->Publish();
      }
    });
  };
  auto rec = WARREN_TRY(node_->StartExec(id, NewExecId(), es));
  return ExecStart{rec, r.wait};
}

Result<std::shared_ptr<node::ExecRecord>> Api::GetExec(const Principal& who, const std::string& id,
                                                       const std::string& exec_id) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.spec.trajectory) return GetTrajectoryExec(sb, exec_id);
  return node_->GetExec(id, exec_id);
}

Status Api::SignalExec(const Principal& who, const std::string& id, const std::string& exec_id,
                       const std::string& body) {
  json j = body.empty() ? json::object() : WARREN_TRY(ParseJsonBody(body));
  if (!j.is_object()) return Invalid("signal request must be an object");
  for (auto& [k, v] : j.items())
    if (k != "signal") return Invalid("unknown field `" + k + "` in signal request");
  std::string name = j.value("signal", "TERM");
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  static const std::map<std::string, int> kSignals = {
      {"TERM", SIGTERM}, {"KILL", SIGKILL}, {"INT", SIGINT},   {"HUP", SIGHUP},  {"QUIT", SIGQUIT},
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}};
  auto it = kSignals.find(name);
  if (it == kSignals.end()) return Invalid("unknown signal `" + name + "`");
  WARREN_TRY(Sandbox(who, id));
  return node_->SignalExec(id, exec_id, it->second);
}

namespace {

Status AbsPath(const Query& q, std::string* path) {
  auto it = q.find("path");
  if (it == q.end() || it->second.empty() || it->second[0] != '/')
    return Invalid("query parameter `path` must be an absolute path");
  if (it->second.size() > 4096 || it->second.find('\0') != std::string::npos)
    return Invalid("bad path");
  *path = it->second;
  return Status::Ok();
}

constexpr uint64_t kMaxFileBytes = 64ull << 20;

}  // namespace

Status Api::PutFile(const Principal& who, const std::string& id, const Query& q,
                    const std::string& body) {
  std::string path;
  WARREN_RETURN_IF_ERROR(AbsPath(q, &path));
  uint32_t mode = 0644;
  if (auto it = q.find("mode"); it != q.end()) {
    char* end = nullptr;
    unsigned long m = strtoul(it->second.c_str(), &end, 8);
    if (it->second.empty() || *end || m > 07777) return Invalid("`mode` must be octal, e.g. 0644");
    mode = static_cast<uint32_t>(m);
  }
  for (auto& [k, v] : q)
    if (k != "path" && k != "mode") return Invalid("unknown query parameter `" + k + "`");
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, "write file", id,
                  std::string("sandbox is ") + StateName(sb.state));
  return node_->WriteFile(id, path, mode, body);
}

namespace {

// Runs argv in the sandbox (as its root, inside its namespaces: the host never resolves a
// sandbox path) and waits; errors name `what`.
Result<std::shared_ptr<node::ExecRecord>> RunTool(node::NodeApi* node, const std::string& id,
                                                  const std::string& what,
                                                  std::vector<std::string> argv,
                                                  const std::string* stdin_data,
                                                  uint64_t max_output) {
  node::ExecSpec es;
  es.argv = std::move(argv);
  es.timeout_ms = 300000;
  es.max_output = max_output;
  es.binary = true;
  if (stdin_data) {
    es.has_stdin = true;
    es.stdin_data = *stdin_data;
  }
  auto rec = WARREN_TRY(node->StartExec(id, NewExecId(), es));
  if (!rec->WaitDone(310000)) return Status(Code::kUnavailable, what, id, "timed out");
  json r = rec->ResultJson();
  if (r.contains("error"))
    return Status(Code::kUnavailable, what, id, r["error"].get<std::string>());
  int code = r.value("exit_code", json(-1)).is_number() ? r["exit_code"].get<int>() : -1;
  if (code == 127) return Invalid("the sandbox's image has no `tar` (or `sh`) to do this with", id);
  if (code != 0) {
    std::string err = rec->RawOutput(2);
    if (err.size() > 2000) err.resize(2000);
    Code c =
        err.find("No such file") != std::string::npos || err.find("not found") != std::string::npos
            ? Code::kNotFound
            : Code::kInvalid;
    return Status(c, what, id,
                  "tar failed (exit " + std::to_string(code) + "): " + SanitizeUtf8(err));
  }
  return rec;
}

}  // namespace

// Directories as tar go through the image's own `tar` inside the sandbox: the archive is
// unpacked with the sandbox's credentials, in its mount namespace, under its Landlock rules,
// so a hostile archive (or symlink in the sandbox) can only ever touch the sandbox.
Result<std::string> Api::RunningPath(const Principal& who, const std::string& id, const Query& q,
                                     const char* op) {
  std::string path;
  WARREN_RETURN_IF_ERROR(AbsPath(q, &path));
  for (auto& [k, v] : q)
    if (k != "path") return Invalid("unknown query parameter `" + k + "`");
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, op, id, std::string("sandbox is ") + StateName(sb.state));
  if (!runtime::TraitsOf(sb.spec.backend).keeps_files)
    return Status(Code::kConflict, op, id,
                  "a fncall sandbox keeps no files between execs; use a container sandbox");
  return path;
}

Status Api::PutArchive(const Principal& who, const std::string& id, const Query& q,
                       const std::string& body) {
  const std::string path = WARREN_TRY(RunningPath(who, id, q, "put archive"));
  (void)WARREN_TRY(
      RunTool(node_, id, "unpack archive into " + path,
              {"/bin/sh", "-c", "mkdir -p -- \"$1\" && exec tar -x -f - -C \"$1\"", "sh", path},
              &body, 64 << 10));
  return Status::Ok();
}

Result<std::string> Api::GetArchive(const Principal& who, const std::string& id, const Query& q) {
  const std::string path = WARREN_TRY(RunningPath(who, id, q, "get archive"));
  auto rec = WARREN_TRY(RunTool(node_, id, "archive " + path,
                                {"tar", "-c", "-f", "-", "-C", path, "."}, nullptr, kMaxFileBytes));
  if (rec->ResultJson().value("stdout_truncated", false))
    return Invalid(
        "the directory as tar is larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB",
        path);
  return rec->RawOutput(1);
}

Result<std::string> Api::GetFile(const Principal& who, const std::string& id, const Query& q) {
  const std::string path = WARREN_TRY(RunningPath(who, id, q, "read file"));
  return node_->ReadFile(id, path, kMaxFileBytes);
}

Result<json> Api::UploadLayer(const Query& q, const std::string& body_path) {
  for (auto& [k, v] : q)
    if (k != "name" && k != "tag" && k != "kind" && k != "source")
      return Invalid("unknown query parameter `" + k + "`");
  auto get = [&](const char* k, const char* def) {
    auto it = q.find(k);
    return it == q.end() ? std::string(def) : it->second;
  };
  std::string name = get("name", ""), tag = get("tag", "latest"), kind = get("kind", "base");
  // Where the builder got the content (free text, shown by `image ls`).
  std::string source = get("source", "");
  if (source.size() > 512) return Invalid("`source` is at most 512 bytes");
  source = SanitizeUtf8(source);
  std::string n, t;
  WARREN_RETURN_IF_ERROR(ParseImageRef(name + ":" + tag, &n, &t));
  if (kind != "base" && kind != "workspace" && kind != "tool")
    return Invalid("`kind` must be base, workspace or tool");
  bool erofs = image::LayerStore::IsErofs(body_path);
  auto blob = erofs ? layers_->ImportErofs(body_path) : layers_->ImportTar(body_path);
  if (!blob.ok()) return blob.status().Context("build image " + name + ":" + tag);
  LayerRecord rec{name,      tag,          blob->digest,
                  kind,      NowRfc3339(), !source.empty() ? source : erofs ? "erofs" : "tar",
                  blob->size};
  // A moved tag may leave its old blob unreferenced.
  auto old = state_->GetLayer(name, tag);
  WARREN_RETURN_IF_ERROR(state_->PutLayer(rec));
  if (old.ok() && old->digest != rec.digest) CollectBlobs({old->digest});
  return rec.ToJson();
}

Result<json> Api::ListLayers() {
  json arr = json::array();
  for (const auto& l : state_->ListLayers()) arr.push_back(l.ToJson());
  return json{{"layers", arr}};
}

Status Api::DeleteLayer(const std::string& ref) {
  std::string name, tag;
  WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
  auto rec = WARREN_TRY(state_->GetLayer(name, tag));
  WARREN_RETURN_IF_ERROR(state_->RemoveLayer(name, tag));
  // The blob stays while a sandbox made from it exists; new sandboxes cannot use the name.
  CollectBlobs({rec.digest});
  return Status::Ok();
}

void Api::ExpireLease(const std::string& lease) {
  for (const SandboxRecord& sb : sandboxes_.List()) {
    if (sb.spec.lease != lease) continue;
    const std::string& id = sb.id;
    const bool pause = sb.spec.on_lease_expiry == "pause";
    Status st = pause ? (sb.state == SandboxState::kRunning ? SetPaused(System(), id, true).status()
                                                            : Status::Ok())
                      : DeleteSandbox(System(), id);
    if (!st.ok() && st.code() != Code::kNotFound)
      spdlog::warn("lease {} expired: sandbox {}: {}", lease, id, st.ToString());
    else
      spdlog::info("lease {} expired: sandbox {} {}", lease, id, pause ? "paused" : "deleted");
  }
}

Status Api::ReleaseLease(const Principal& who, const std::string& id) {
  WARREN_RETURN_IF_ERROR(leases_.Release(who, id));
  ExpireLease(id);
  return Status::Ok();
}

json Api::ListTokens() {
  json out = tokens_->List();
  for (auto& t : out["tokens"]) t["usage"] = quota_.Usage(t.value("name", ""));
  return out;
}

void Api::SetCalls(fncall::CallService* calls) { calls_ = calls; }

void Api::StopCalls() {
  if (calls_) calls_->Shutdown();
}

// Calls keep nothing, so there is nothing of one principal's for another to see; what a
// principal may spend on them is its quota (max_calls at once, call_rate per second).
Result<json> Api::Call(const Principal& who, const std::string& body) {
  if (!calls_) return Status(Code::kUnavailable, "call", "fncall", "not enabled on this server");
  json rq = json::parse(body, nullptr, false);
  if (rq.is_discarded()) return Invalid("call: the body is not JSON");
  return RunCalls(who, 1, [&] { return calls_->Call(rq); });
}

Result<json> Api::CallBatch(const Principal& who, const std::string& body) {
  if (!calls_) return Status(Code::kUnavailable, "call", "fncall", "not enabled on this server");
  json rq = json::parse(body, nullptr, false);
  if (rq.is_discarded()) return Invalid("call batch: the body is not JSON");
  const int64_t n = rq.is_object() && rq.contains("calls") && rq["calls"].is_array()
                        ? std::max<int64_t>(1, static_cast<int64_t>(rq["calls"].size()))
                        : 1;
  return RunCalls(who, n, [&] { return calls_->CallBatch(rq); });
}

Result<json> Api::RunCalls(const Principal& who, int64_t n,
                           const std::function<Result<json>()>& run) {
  if (Status st = quota_.ReserveCalls(who, n); !st.ok()) {
    MutexLock lock(&err_mu_);
    calls_refused_ += n;
    return st;
  }
  Cleanup release([&] { quota_.ReleaseCalls(who.name, n); });
  {
    MutexLock lock(&err_mu_);
    calls_started_ += n;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto r = run();
  call_seconds_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return r;
}

json Api::Nodes() {
  json n = node_->Info();
  if (calls_) n["fncall"] = calls_->Stats();
  return {{"nodes", json::array({n})}};
}

std::string Api::Metrics() {
  // Every backend and state the contract names has its sample, 0 included: a scraper (or a
  // test) finds the series before the first sandbox exists.
  // Counts kept as records change: no read of the records.
  SandboxTable::Counts by_state = sandboxes_.counts();
  for (runtime::BackendKind backend : runtime::kAllBackendKinds)
    for (SandboxState st : kAllSandboxStates) by_state.try_emplace({backend, st}, 0);
  std::ostringstream o;
  o << "# TYPE warren_sandboxes gauge\n";
  for (auto& [k, n] : by_state)
    o << "warren_sandboxes{backend=\"" << runtime::BackendName(k.first) << "\",state=\""
      << StateName(k.second) << "\"} " << n << "\n";
  o << create_seconds_.Render("warren_create_seconds");
  o << exec_seconds_.Render("warren_exec_seconds");
  o << call_seconds_.Render("warren_call_seconds");
  if (calls_) {
    json st = calls_->Stats();
    o << "# TYPE warren_calls_total counter\nwarren_calls_total " << st.value("calls", 0) << "\n";
    o << "# TYPE warren_call_runs_total counter\nwarren_call_runs_total " << st.value("runs", 0)
      << "\n";
    o << "# TYPE warren_fncall_runners gauge\nwarren_fncall_runners " << st["runners"].size()
      << "\n";
    o << "# TYPE warren_fncall_runner_starts_total counter\nwarren_fncall_runner_starts_total "
      << st.value("runner_starts", 0) << "\n";
  }
  o << "# TYPE warren_calls_running gauge\nwarren_calls_running " << quota_.CallsRunning() << "\n";
  {
    MutexLock lock(&err_mu_);
    o << "# TYPE warren_calls_admitted_total counter\nwarren_calls_admitted_total "
      << calls_started_ << "\n";
    o << "# TYPE warren_calls_refused_total counter\nwarren_calls_refused_total " << calls_refused_
      << "\n";
  }
  o << "# TYPE warren_api_errors_total counter\n";
  {
    MutexLock lock(&err_mu_);
    std::map<std::string, uint64_t> all;
    for (const char* code : {"not_found", "invalid", "conflict", "quota", "unauthorized",
                             "forbidden", "unavailable", "internal"})
      all[code] = 0;
    for (auto& [code, n] : errors_) all[code] = n;
    for (auto& [code, n] : all)
      o << "warren_api_errors_total{code=\"" << code << "\"} " << n << "\n";
  }
  // Node capacity and usage.
  const json node = node_->Info();  // once: it walks the node's state
  o << "# TYPE warren_node_sandboxes gauge\nwarren_node_sandboxes " << node.value("sandboxes", 0)
    << "\n";
  o << "# TYPE warren_node_layer_mounts gauge\nwarren_node_layer_mounts "
    << node.value("layer_mounts", 0) << "\n";
  o << "# TYPE warren_node_uid_slots gauge\n"
    << "warren_node_uid_slots{state=\"used\"} " << node.value("uid_slots_used", 0) << "\n"
    << "warren_node_uid_slots{state=\"total\"} " << node.value("uid_slots", 0) << "\n";
  o << "# TYPE warren_node_cpus gauge\nwarren_node_cpus " << std::thread::hardware_concurrency()
    << "\n";
  if (FILE* f = fopen("/proc/meminfo", "re")) {
    char key[64];
    unsigned long long kb;
    o << "# TYPE warren_node_memory_bytes gauge\n";
    while (fscanf(f, "%63s %llu kB\n", key, &kb) == 2) {
      if (!strcmp(key, "MemTotal:"))
        o << "warren_node_memory_bytes{kind=\"total\"} " << kb * 1024 << "\n";
      if (!strcmp(key, "MemAvailable:"))
        o << "warren_node_memory_bytes{kind=\"available\"} " << kb * 1024 << "\n";
    }
    fclose(f);
  }
  // Egress through the node's proxy: bytes fetched upstream and served from its package
  // cache, in total and per sandbox, with connections and refusals.
  json net = node.value("network", json::object());
  json proxy = net.value("proxy", json::object());
  if (!proxy.is_object()) proxy = json::object();
  o << "# TYPE warren_egress_bytes_total counter\n"
    << "warren_egress_bytes_total{source=\"upstream\"} "
    << proxy.value("upstream_bytes", uint64_t{0}) << "\n"
    << "warren_egress_bytes_total{source=\"cache\"} " << proxy.value("cache_bytes", uint64_t{0})
    << "\n";
  json per = proxy.value("sandboxes", json::object());
  o << "# TYPE warren_egress_sandbox_bytes_total counter\n";
  for (auto& [id, b] : per.items())
    o << "warren_egress_sandbox_bytes_total{sandbox=\"" << id << "\",source=\"upstream\"} "
      << b.value("upstream_bytes", uint64_t{0}) << "\n"
      << "warren_egress_sandbox_bytes_total{sandbox=\"" << id << "\",source=\"cache\"} "
      << b.value("cache_bytes", uint64_t{0}) << "\n";
  o << "# TYPE warren_egress_connections_total counter\n";
  for (auto& [id, b] : per.items())
    o << "warren_egress_connections_total{sandbox=\"" << id << "\"} "
      << b.value("connections", uint64_t{0}) << "\n";
  o << "# TYPE warren_egress_refused_total counter\n"
    << "warren_egress_refused_total " << proxy.value("refused", uint64_t{0}) << "\n";
  o << "# TYPE warren_egress_cache_bytes gauge\n"
    << "warren_egress_cache_bytes " << proxy.value("cache_size_bytes", uint64_t{0}) << "\n";
  json dns = net.value("dns", json::object());
  if (dns.is_object()) {
    o << "# TYPE warren_dns_queries_total counter\n";
    for (const char* k : {"answered", "refused", "failed"})
      o << "warren_dns_queries_total{result=\"" << k << "\"} " << dns.value(k, uint64_t{0}) << "\n";
  }
  return o.str();
}

}  // namespace warren::server
