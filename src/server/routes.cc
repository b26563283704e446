#include "server/routes.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>
#include <vector>

#include "base/cleanup.h"
#include "base/ids.h"
#include "base/utf8.h"
#include "net/policy.h"
#include "node/node_wire.h"
#include "server/input_actions.h"
#include "server/sandbox_query.h"

namespace warren::server {

using nlohmann::json;

namespace {
// One training job's sandboxes in one call (the unit's largest job is 32,000).
constexpr int64_t kMaxBatch = 50000;
// The daemon's own actions (TTL reaping) act with the admin's rights.
const Principal& System() {
  static const Principal p{"admin", {"admin"}, {}};
  return p;
}

std::optional<double> IdleTimeoutOf(const SandboxSpec& spec) {
  if (!spec.idle_timeout_s) return std::nullopt;
  return static_cast<double>(*spec.idle_timeout_s);
}
}  // namespace

Api::Api(StateStore* state, StateStore* durable, node::Fleet* fleet, image::LayerStore* layers,
         TokenRegistry* tokens)
    : state_(state),
      sandboxes_(state),
      fleet_(fleet),
      layers_(state, layers),
      tokens_(tokens),
      leases_(state),
      calls_(&quota_),
      reaper_({[this](const std::string& id) {
                 auto sb = sandboxes_.Get(id);
                 if (!sb.ok()) return 0;
                 auto node = NodeOf(*sb);
                 // A node out of reach: its sandbox counts as busy, not idle.
                 return node.ok() ? (*node)->RunningExecs(id) : 1;
               },
               [this](const std::string& id) {
                 Status st = DeleteSandbox(System(), id);
                 if (!st.ok() && st.code() != Code::kNotFound) CountError(st.code());
               },
               [this] {
                 for (const auto& lease : leases_.TakeExpired()) ExpireLease(lease);
               }}),
      // An hour at 10 s a sample.
      history_([this] { return SampleCounters(); }, std::chrono::seconds(10), 360),
      trajectories_(durable, fleet, &sandboxes_,
                    [this](double seconds) { exec_seconds_.Observe(seconds); }) {
  // A store that counts shares is a cluster's, shared by API server replicas: quotas are
  // checked in it and leases read from it, never from one replica's memory.
  if (state_->CountsShares()) {
    quota_.CountSharesIn(state_);
    leases_.SetShared(true);
  } else {
    quota_.Count(sandboxes_.List());
  }
  leases_.Load();
  fleet_->SetOnSandboxLost([this](const std::string& id, const std::string& reason) {
    auto sb = sandboxes_.Transition(
        id, SandboxState::kFailed, {SandboxState::kRunning}, [&](SandboxRecord& r) {
          r.error = SandboxRecord::Error{
              "internal", reason.empty() ? "the sandbox's init process exited" : reason};
        });
    if (sb.ok()) ReleaseQuotaOf(*sb);
  });
  fleet_->SetOnNodeLost(
      [this](const std::string& node, const std::string& reason) { NodeLost(node, reason); });
}

void Api::NodeLost(const std::string& node, const std::string& reason) {
  int n = 0;
  for (const SandboxRecord& sb : sandboxes_.List()) {
    if (sb.node != node) continue;
    auto lost = sandboxes_.Transition(sb.id, SandboxState::kLost,
                                      {SandboxState::kCreating, SandboxState::kRunning,
                                       SandboxState::kPaused, SandboxState::kStopping},
                                      [&](SandboxRecord& r) { r.reason = reason; });
    if (!lost.ok()) continue;
    ReleaseQuotaOf(sb);
    if (sb.spec.lease) leases_.NoteLost(*sb.spec.lease, sb.id);  // its holder is told
    ++n;
  }
  if (n > 0) spdlog::warn("node {} left: {} sandbox(es) lost ({})", node, n, reason);
}

Api::~Api() {
  StopHistory();
  StopReaper();
}

void Api::StartReaper() { reaper_.Start(); }

void Api::StopReaper() { reaper_.Stop(); }

void Api::ReleaseQuotaOf(const SandboxRecord& sb) {
  // Once: a sandbox that failed gave both back then, not again when it is deleted. Callers
  // call this only after the write that took the share away succeeded (a transition out of a
  // state that held it, or the removal only one caller gets), so two API servers never both
  // give it back.
  quota_.Release(sb.owner, sb.spec.cpu, static_cast<int64_t>(sb.spec.memory_mb));
  fleet_->Release(sb.node, AskOf(sb.spec, sb.layers));
}

node::PlacementAsk Api::AskOf(const SandboxSpec& spec,
                              const std::vector<SandboxRecord::Layer>& layers) {
  node::PlacementAsk ask;
  ask.backend = spec.backend;
  ask.cpu = spec.cpu;
  ask.memory_mb = spec.memory_mb;
  ask.disk_mb = spec.disk_mb;
  ask.node_selector = spec.node_selector;
  for (const auto& l : layers) ask.layers.push_back(l.digest);
  return ask;
}

Result<node::NodeApi*> Api::NodeOf(const SandboxRecord& sb) { return fleet_->Node(sb.node); }

void Api::Touch(const SandboxRecord& sb) {
  if (!used_) return reaper_.Touch(sb.id);
  if (sb.spec.idle_timeout_s) used_(sb.id, static_cast<double>(*sb.spec.idle_timeout_s));
}

void Api::SetUseRecorder(std::function<void(const std::string&, double)> used) {
  used_ = std::move(used);
}

std::optional<double> Api::LocalIdleTimeout(const SandboxSpec& spec) const {
  return used_ ? std::nullopt : IdleTimeoutOf(spec);
}

Result<bool> Api::EndIfIdle(const std::string& id) {
  auto sb = WARREN_TRY(sandboxes_.Get(id));
  auto node = NodeOf(sb);
  // A node out of reach: its sandbox counts as busy, not idle (as the reaper's).
  if (!node.ok() || (*node)->RunningExecs(id) > 0) return false;
  spdlog::info("sandbox {} idle for its idle_timeout_s: deleting", id);
  Status st = DeleteSandbox(System(), id);
  if (!st.ok()) {
    if (st.code() != Code::kNotFound) CountError(st.code());
    return st;
  }
  return true;
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
  const double wall = UnixNow();
  for (const SandboxRecord& sb : sandboxes_.List()) {
    const std::string& id = sb.id;
    const std::string state = StateName(sb.state);
    if (sb.state == SandboxState::kFailed) continue;
    if (sb.state == SandboxState::kStopping) {
      // A delete the earlier daemon did not finish: its processes go with the unadopted
      // ones (ReapUnadopted), its record goes now.
      if (auto gone = sandboxes_.Remove(id); gone.ok() && HoldsShare(StateName(gone->state)))
        ReleaseQuotaOf(*gone);
      continue;
    }
    // Running and paused sandboxes kept running while we were away: take them over. A fncall
    // sandbox has no processes between execs: it is simply made again.
    auto node = NodeOf(sb);
    Status st = !node.ok()         ? node.status()
                : IsLive(sb.state) ? (sb.spec.backend == runtime::BackendKind::kFncall
                                          ? (*node)->CreateSandbox(FncallSpecOf(sb)).status()
                                          : (*node)->AdoptSandbox(id))
                                   : Status(Code::kUnavailable, "adopt", id,
                                            "it was " + state + " when warren serve stopped");
    if (st.ok()) {
      spdlog::info("re-adopted sandbox {} ({})", id, state);
      // Its TTL runs from its creation, on the wall clock.
      double created = ParseRfc3339(sb.created_at);
      const double ttl = static_cast<double>(sb.spec.ttl_s);
      double left = created > 0 ? created + ttl - wall : ttl;
      reaper_.Track(id, left, LocalIdleTimeout(sb.spec));
      continue;
    }
    spdlog::warn("sandbox {} could not be re-adopted: {}", id, st.ToString());
    auto failed = sandboxes_.Transition(id, SandboxState::kFailed, {}, [&](SandboxRecord& r) {
      r.error = SandboxRecord::Error{
          "unavailable",
          "warren serve restarted and could not take the sandbox over: " + st.ToString()};
    });
    if (failed.ok() && HoldsShare(StateName(sb.state))) ReleaseQuotaOf(sb);
  }
}

int Api::CleanOrphanedCreates() {
  auto orphans = state_->OrphanedCreates();
  if (!orphans.ok()) {
    spdlog::warn("look for creates left by a dead API server: {}", orphans.status().ToString());
    return 0;
  }
  int n = 0;
  for (const std::string& id : *orphans) {
    auto sb = sandboxes_.Get(id);
    if (!sb.ok() && sb.status().code() == Code::kNotFound) {
      // Placed, and its maker died before the record was written: only the claim holds room.
      if (fleet_->Abandon(id)) {
        spdlog::warn("sandbox {}: its API server died while placing it; room given back", id);
        ++n;
      }
      continue;
    }
    if (!sb.ok() || sb->state != SandboxState::kCreating) continue;
    if (!sb->node.empty()) {
      auto node = NodeOf(*sb);
      // Its node out of reach: when it is lost, the record is too; else try again next time.
      if (!node.ok()) continue;
      Status st = (*node)->DeleteSandbox(id);
      if (!st.ok() && st.code() != Code::kNotFound) {
        spdlog::warn("clean up half-made sandbox {}: {}", id, st.ToString());
        continue;
      }
    }
    auto gone = sandboxes_.Remove(id);
    if (!gone.ok()) continue;  // another replica cleaned it up first
    ReleaseQuotaOf(*gone);
    spdlog::warn("sandbox {}: its API server died during the create; cleaned up", id);
    ++n;
  }
  return n;
}

Status Api::ExpireSandbox(const std::string& id) {
  Status st = DeleteSandbox(System(), id);
  if (!st.ok() && st.code() != Code::kNotFound) CountError(st.code());
  return st;
}

void Api::CountError(Code code) { errors_.Count(code); }

Result<json> Api::CreateOne(const Principal& who, const SandboxSpec& spec, bool reserved,
                            const ForkOrigin* fork) {
  const SandboxRecord::Lineage* lineage = fork ? &fork->lineage : nullptr;
  double t0 = NowSeconds();
  // The quota share: taken here, or already by the batch (in item order); given back unless a
  // sandbox ends up holding it.
  Cleanup release(
      [&] { quota_.Release(who.name, spec.cpu, static_cast<int64_t>(spec.memory_mb)); });
  if (!reserved) release.Cancel();
  if (spec.backend == runtime::BackendKind::kFncall && !calls_.enabled())
    return Status(Code::kUnavailable, "create sandbox", "fncall", "not enabled on this server");
  if (spec.lease && !leases_.Get(who, *spec.lease).ok())
    return Invalid("unknown or expired lease `" + *spec.lease + "`");

  // A trainer that comes back after preemption asks for its trajectory's sandbox again: it
  // gets the live one (with all the effects of the steps it will replay), not a new one.
  // Creates of one trajectory are serialized, so concurrent ones cannot make two sandboxes.
  std::unique_lock<std::mutex> traj_lock;
  if (spec.trajectory) {
    traj_lock = trajectories_.LockCreates();
    for (SandboxRecord& sb : sandboxes_.List())
      if (sb.spec.trajectory == spec.trajectory && sb.owner == who.name && IsLive(sb.state))
        return Reattach(who, spec, std::move(sb));
  }

  // Resolve NAME:TAG to digests, top layer first: workspace, tools, base. The sandbox records
  // the digests: tags move, what it was made from does not.
  // (A fork holds the pin for all its children: their snapshot is named by no tag yet.)
  std::shared_lock<std::shared_mutex> gc_lock;
  if (!fork) gc_lock = layers_.PinBlobs();
  node::NodeSandboxSpec ns;
  std::vector<SandboxRecord::Layer> made_from;
  auto resolve = [&](const std::string& ref, const char* role) -> Status {
    std::string name, tag;
    WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
    auto rec = state_->GetLayer(name, tag);
    if (!rec.ok() && rec.status().code() != Code::kNotFound) return rec.status();
    if (!rec.ok()) return Invalid(std::string("unknown ") + role + " image `" + ref + "`");
    ns.config.layers.push_back({rec->digest, "", std::string(role) == "tool"});
    made_from.push_back({ref, role, rec->digest});
    return Status::Ok();
  };
  if (fork && !fork->memory.empty()) {
    // A memory fork's child: the parent's disks under the parent's memory, as they are.
    for (const auto& l : fork->below) {
      ns.config.layers.push_back({l.digest, "", l.role == "tool"});
      made_from.push_back(l);
    }
    ns.fork = fork->memory;
  } else if (fork) {
    // A fork's child: its workspace is the snapshot, which its record keeps alive, over the
    // very layers the parent has (the snapshot is a difference from those digests, whatever
    // their tags name now).
    ns.config.layers.push_back({lineage->snapshot, "", false});
    made_from.push_back({lineage->snapshot_ref.empty() ? lineage->snapshot : lineage->snapshot_ref,
                         "workspace", lineage->snapshot});
    for (const auto& l : fork->below) {
      ns.config.layers.push_back({l.digest, "", l.role == "tool"});
      made_from.push_back(l);
    }
  } else {
    if (spec.workspace) WARREN_RETURN_IF_ERROR(resolve(*spec.workspace, "workspace"));
    for (const auto& t : spec.tools) WARREN_RETURN_IF_ERROR(resolve(t, "tool"));
    WARREN_RETURN_IF_ERROR(resolve(spec.image, "base"));
  }

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
  ns.config.display = spec.display;
  ns.network = WARREN_TRY(net::ParsePolicy(spec.network.mode, spec.network.allow));

  // Where it goes: room held there until the sandbox is gone (or this create fails).
  node::PlacementAsk ask = AskOf(spec, made_from);
  ask.sandbox_id = id;
  // Where the parent's memory is.
  if (fork && !fork->memory.empty()) ask.node_selector[node::kNodeNameLabel] = fork->node;
  const double placing = NowSeconds();
  const std::string node_name = WARREN_TRY(fleet_->Place(ask));
  placement_seconds_.Observe(NowSeconds() - placing);
  Cleanup unplace([&] { fleet_->Release(node_name, ask); });
  node::NodeApi* node = WARREN_TRY(fleet_->Node(node_name));

  SandboxRecord sb;
  sb.id = id;
  sb.owner = who.name;
  sb.node = node_name;
  sb.created_at = NowRfc3339();
  sb.state = SandboxState::kCreating;
  sb.spec = spec;
  sb.layers = std::move(made_from);
  if (lineage) sb.lineage = *lineage;
  // A cluster's store checks the owner's share here, against every API server's inserts.
  SandboxTable::Version written;
  WARREN_RETURN_IF_ERROR(sandboxes_.Insert(sb, LimitsOf(who.quotas), &written));
  // A create that fails from here removes its record, and gives back its share and room only
  // if the record still held them: one that went `lost` meanwhile (its node left: Api::
  // NodeLost) or that another replica removed (CleanOrphanedCreates) gave them back then.
  auto drop_record = [&] {
    auto gone = sandboxes_.Remove(id);
    if (!gone.ok() || gone->state != SandboxState::kCreating) {
      unplace.Cancel();
      release.Cancel();
    }
  };
  auto rt = node->CreateSandbox(ns);
  if (gc_lock.owns_lock()) gc_lock.unlock();  // mounted: the kernel holds the blobs open now
  if (!rt.ok()) {
    drop_record();
    return node::NodeFault(rt.status());
  }
  // The filesystem policy holds before anything of the occupant's runs.
  if (!spec.filesystem.empty()) {
    Status fs = node::NodeFault(node->SetFilesystem(id, spec.filesystem));
    if (!fs.ok()) {
      (void)node->DeleteSandbox(id);
      drop_record();
      return fs;
    }
  }
  // From the version inserted: no read unless someone (a delete) wrote the record since.
  auto running = sandboxes_.Transition(id, SandboxState::kRunning, {SandboxState::kCreating},
                                       nullptr, &written);
  if (!running.ok()) {
    (void)node->DeleteSandbox(id);
    drop_record();
    return running.status();
  }
  sb = std::move(*running);
  release.Cancel();  // the sandbox holds its share and its room until deleted (or failed)
  unplace.Cancel();
  // The lease may have expired while we were creating: then this sandbox goes with it now
  // (a fork's child: the fork does it, once it lets go of the blob pin Collect waits for).
  if (!fork && spec.lease && !leases_.Get(who, *spec.lease).ok()) ExpireLease(*spec.lease);
  create_seconds_.Observe(NowSeconds() - t0);
  if (spec.trajectory) trajectories_.Restart(TrajectoryLog::Key(who.name, *spec.trajectory));
  reaper_.Track(id, static_cast<double>(spec.ttl_s), LocalIdleTimeout(spec));
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
  trajectories_.Restart(TrajectoryLog::Key(sb.owner, *spec.trajectory));
  return out;
}

Result<json> Api::CreateSandbox(const Principal& who, const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  SandboxSpec spec = WARREN_TRY(ParseSandboxSpec(j));
  return CreateOne(who, spec);
}

Result<SandboxRecord> Api::CreateSandbox(const Principal& who, const SandboxSpec& spec) {
  json made = WARREN_TRY(CreateOne(who, spec));
  return sandboxes_.Get(made.at("id").get<std::string>());
}

Result<std::vector<SandboxRecord>> Api::OwnedSandboxes(const Principal& who) {
  std::vector<SandboxRecord> out;
  for (SandboxRecord& sb : WARREN_TRY(sandboxes_.ListOrError()))
    if (who.Owns(sb.owner)) out.push_back(std::move(sb));
  return out;
}

Result<SandboxRecord> Api::SetTimeout(const Principal& who, const std::string& id, double seconds) {
  // A sandbox lives at most 30 days from its creation (ParseSandboxSpec's bound on ttl_s,
  // which every record read back is held to).
  constexpr double kMaxTtlS = 30 * 86400;
  if (!(seconds >= 0) || seconds > kMaxTtlS)
    return Invalid("a timeout must be 0 to 30 days in seconds");
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (!IsLive(sb.state))
    return Status(Code::kConflict, "set timeout", id,
                  std::string("sandbox is ") + StateName(sb.state));
  const double created = ParseRfc3339(sb.created_at);
  const double age = created > 0 ? std::max(0.0, UnixNow() - created) : 0;
  if (age + seconds > kMaxTtlS)
    return Invalid("a sandbox lives at most 30 days from its creation", id);
  const auto ttl = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(age + seconds)));
  SandboxRecord updated = WARREN_TRY(sandboxes_.Update(id, [&](SandboxRecord& r) {
    r.spec.ttl_s = ttl;
    return Status::Ok();
  }));
  reaper_.Track(id, seconds, LocalIdleTimeout(updated.spec));
  return updated;
}

Result<json> Api::CreateBatch(const Principal& who, const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  if (!j.is_object()) return Invalid("batch request must be an object {count, spec}");
  for (auto& [k, v] : j.items())
    if (k != "count" && k != "spec") return Invalid("unknown field `" + k + "` in batch request");
  if (!j.contains("count") || !j["count"].is_number_integer() || j["count"].get<int64_t>() < 1 ||
      j["count"].get<int64_t>() > kMaxBatch)
    return Invalid("`count` must be an integer from 1 to " + std::to_string(kMaxBatch));
  SandboxSpec spec = WARREN_TRY(ParseSandboxSpec(j.value("spec", json::object())));
  json out = {{"sandboxes", json::array()}, {"errors", json::array()}};
  int64_t n = j["count"].get<int64_t>();
  if (spec.trajectory && n > 1)
    return Invalid("a trajectory belongs to one sandbox: `count` must be 1");
  std::vector<Result<json>> results(static_cast<size_t>(n));
  std::vector<bool> reserved = WARREN_TRY(ReserveShares(who, spec, n, &results));
  RunCreates(who, spec, reserved, &results);
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

Result<std::vector<bool>> Api::ReserveShares(const Principal& who, const SandboxSpec& spec,
                                             int64_t n, std::vector<Result<json>>* results) {
  // Quotas are taken in item order first, so a batch beyond a quota gets its first items.
  std::vector<bool> reserved(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Status st = quota_.Reserve(who, spec.cpu, static_cast<int64_t>(spec.memory_mb));
    reserved[static_cast<size_t>(i)] = st.ok();
    if (!st.ok()) (*results)[static_cast<size_t>(i)] = st;
  }
  // A cluster's store checks shares at each insert, in whatever order the workers reach it:
  // the items beyond what the owner's share has room for now are refused here, in item
  // order, as above (the inserts still check: another request may take room meanwhile).
  if (const ShareLimits limits = LimitsOf(who.quotas); state_->CountsShares() && limits.any()) {
    auto used = state_->ShareOf(who.name);
    if (!used.ok()) {
      ReleaseShares(who, spec, reserved);
      return used.status();
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!reserved[static_cast<size_t>(i)]) continue;
      const auto memory_mb = static_cast<int64_t>(spec.memory_mb);
      Status st = AdmitShare(who.name, limits, *used, spec.cpu, memory_mb);
      if (!st.ok()) {
        quota_.Release(who.name, spec.cpu, memory_mb);
        reserved[static_cast<size_t>(i)] = false;
        (*results)[static_cast<size_t>(i)] = st;
        continue;
      }
      used->sandboxes += 1;
      used->cpu += spec.cpu;
      used->memory_mb += memory_mb;
    }
  }
  return reserved;
}

void Api::ReleaseShares(const Principal& who, const SandboxSpec& spec,
                        const std::vector<bool>& reserved) {
  for (bool r : reserved)
    if (r) quota_.Release(who.name, spec.cpu, static_cast<int64_t>(spec.memory_mb));
}

void Api::RunCreates(const Principal& who, const SandboxSpec& spec,
                     const std::vector<bool>& reserved, std::vector<Result<json>>* results,
                     const ForkOrigin* fork) {
  // Several creates at once, as many as the fleet says (Fleet::CreatesAtOnce).
  const auto n = static_cast<int64_t>(reserved.size());
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;)
      if (reserved[static_cast<size_t>(i)])
        (*results)[static_cast<size_t>(i)] = CreateOne(who, spec, true, fork);
  };
  const int64_t workers = std::min<int64_t>(n, fleet_->CreatesAtOnce());
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

Result<SandboxRecord> Api::Sandbox(const Principal& who, const std::string& id) {
  auto sb = sandboxes_.Get(id);
  if (!sb.ok() && sb.status().code() != Code::kNotFound) return sb.status();
  if (!sb.ok() || !who.Owns(sb->owner)) return NotFound("sandbox", id);
  // Any use of a sandbox through the API (get, exec, files, streams, pause) counts as
  // activity for its idle timeout; the daemon's own actions do not.
  if (&who != &System()) Touch(*sb);
  return sb;
}

Result<json> Api::GetSandbox(const Principal& who, const std::string& id) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  json j = ToJson(sb);
  // How its node holds it (active, idle or hibernated; memory in RAM and in swap): read, never
  // woken, by this call. Absent where the node does not track it (fncall) or cannot be reached.
  if (sb.state == SandboxState::kRunning || sb.state == SandboxState::kPaused) {
    if (auto node = NodeOf(sb); node.ok())
      if (auto d = (*node)->Density(id); d.ok())
        j["density"] = node::density::SandboxDensityJson(*d);
  }
  return j;
}

Result<json> Api::ListSandboxes(const Principal& who, const Query& q) {
  const SandboxQuery query = WARREN_TRY(ParseSandboxQuery(q));
  // An unreadable store is an error, never "you have no sandboxes".
  const std::vector<SandboxTable::Shared> all = WARREN_TRY(sandboxes_.ListShared());
  std::vector<const SandboxRecord*> visible;
  visible.reserve(all.size());
  for (const SandboxTable::Shared& sb : all)
    if (who.Owns(sb->owner)) visible.push_back(sb.get());
  const SandboxPage page = SelectPage(visible, query);
  json out = json::array();
  for (const SandboxRecord* sb : page.items) out.push_back(ToJson(*sb));
  json j{{"sandboxes", std::move(out)}, {"total", page.total}};
  if (!page.next_page_token.empty()) j["next_page_token"] = page.next_page_token;
  return j;
}

Status Api::DeleteSandbox(const Principal& who, const std::string& id) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  // `stopping` while the node kills it: visible to readers, and if the daemon dies now the
  // next one finishes the deletion (ReconcileAfterRestart). A sandbox already stopping (a
  // delete under way, or one the earlier daemon left) is deleted again.
  if (sb.state == SandboxState::kCreating)
    return Status(Code::kConflict, "delete sandbox", id,
                  "sandbox is creating; delete it once its create returned");
  if (sb.state == SandboxState::kLost) {
    // Its node is gone: the record goes now. Should the node come back, it finds no record
    // for what it still runs and kills it (ReapUnadopted).
    if (auto node = NodeOf(sb); node.ok()) (void)(*node)->DeleteSandbox(id);
    reaper_.Forget(id);
    trajectories_.Forget(id);
    return sandboxes_.Remove(id).status();
  }
  std::optional<SandboxState> was;
  if (IsLive(sb.state)) {
    WARREN_RETURN_IF_ERROR(sandboxes_
                               .Transition(id, SandboxState::kStopping,
                                           {SandboxState::kRunning, SandboxState::kPaused},
                                           [&](const SandboxRecord& r) { was = r.state; })
                               .status());
  }
  auto node = NodeOf(sb);
  if (!node.ok()) {
    if (was) (void)sandboxes_.Transition(id, *was, {SandboxState::kStopping});
    return node.status();
  }
  Status st = (*node)->DeleteSandbox(id);
  // A sandbox the node does not know (failed at a restart) only needs its record removed.
  if (!st.ok() && st.code() != Code::kNotFound) {
    if (was) (void)sandboxes_.Transition(id, *was, {SandboxState::kStopping});
    return node::NodeFault(st);
  }
  reaper_.Forget(id);
  trajectories_.Forget(id);
  const SandboxRecord gone = WARREN_TRY(sandboxes_.Remove(id));
  if (HoldsShare(StateName(gone.state))) ReleaseQuotaOf(gone);
  std::vector<std::string> digests;
  for (const auto& l : sb.layers) digests.push_back(l.digest);
  layers_.Collect(digests);
  return Status::Ok();
}

Result<json> Api::SetPaused(const Principal& who, const std::string& id, bool paused) {
  const char* op = paused ? "pause" : "resume";
  const SandboxState from = paused ? SandboxState::kRunning : SandboxState::kPaused;
  const SandboxState to = paused ? SandboxState::kPaused : SandboxState::kRunning;
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state == to) return ToJson(sb);  // already there: a no-op
  if (sb.state != from)
    return Status(Code::kConflict, op, id, std::string("sandbox is ") + StateName(sb.state));
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  WARREN_RETURN_IF_ERROR(
      node::NodeFault(paused ? node->PauseSandbox(id) : node->ResumeSandbox(id)));
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
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  WARREN_RETURN_IF_ERROR(node::NodeFault(node->SetNetwork(id, policy)));
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
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  if (Status st = node::NodeFault(node->SetFilesystem(id, policy)); !st.ok()) {
    // A refused policy changed nothing. Any other failure may have left the sandbox between
    // two policies: the one in force before is applied again.
    if (st.code() != Code::kInvalid) {
      Status back = node->SetFilesystem(id, sb.spec.filesystem);
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
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  auto changed = node->Changes(id, under, limit);
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
  return StartExec(who, id, WARREN_TRY(ParseExecRequest(j)));
}

Result<Api::ExecStart> Api::StartExec(const Principal& who, const std::string& id, ExecRequest r) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, "exec", id, std::string("sandbox is ") + StateName(sb.state));
  const bool recorded = sb.spec.trajectory.has_value();
  if (r.step && !recorded) return Invalid("`step` needs a sandbox created with a `trajectory`");
  // A step is replayed from its request alone; what a person types into it is not recorded.
  if (recorded && (r.tty || r.stdin_open))
    return Invalid(
        "an exec with `tty` or `stdin_open` cannot be a trajectory's step: its input "
        "is not part of the request that a replay repeats",
        id);
  node::ExecSpec es;
  es.argv = r.argv;  // copies: a trajectory step records the request too
  es.env = r.env;
  es.cwd = r.cwd;
  es.has_stdin = r.stdin_data.has_value();
  if (r.stdin_data) es.stdin_data = *r.stdin_data;
  es.timeout_ms = static_cast<int64_t>(r.timeout_s * 1000);
  es.max_output = r.max_output_bytes;
  // A terminal's bytes are what the client's terminal must get, exactly.
  es.binary = r.binary || r.tty.has_value();
  es.tty = r.tty;
  es.stdin_open = r.stdin_open;
  // What a terminal program needs to know what it draws on, unless the sandbox or the
  // request says (the CLI sends the client's own).
  if (r.tty) es.env_defaults["TERM"] = "xterm";
  for (const auto& [k, v] : r.env_defaults) es.env_defaults.emplace(k, v);
  if (recorded) return trajectories_.StartExec(sb, r, std::move(es));
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
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  auto rec = WARREN_TRY(node->StartExec(id, NewExecId(), es));
  return ExecStart{rec, r.wait};
}

Result<std::shared_ptr<node::ExecRecord>> Api::GetExec(const Principal& who, const std::string& id,
                                                       const std::string& exec_id) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.spec.trajectory) return trajectories_.GetExec(sb, exec_id);
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  return node->GetExec(id, exec_id);
}

Result<json> Api::ExecHistory(const Principal& who, const std::string& id) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  std::vector<node::ExecSummary> execs;
  // Only a live sandbox's node keeps its commands; one that ended has no history left.
  if (IsLive(sb.state)) {
    node::NodeApi* node = WARREN_TRY(NodeOf(sb));
    auto got = node->ExecHistory(id);
    if (got.ok())
      execs = std::move(*got);
    else if (got.status().code() != Code::kNotFound)
      return got.status();
  }
  json list = json::array();
  for (const node::ExecSummary& e : execs) {
    list.push_back({{"exec_id", e.exec_id},
                    {"argv", e.argv},
                    {"started_at", Rfc3339(e.started_unix)},
                    {"state", e.running ? "running" : "exited"},
                    {"exit_code", e.exit_code ? json(*e.exit_code) : json(nullptr)},
                    {"signal", e.signal.empty() ? json(nullptr) : json(e.signal)},
                    {"timed_out", e.timed_out},
                    {"duration_ms", e.duration_ms},
                    {"output_bytes", e.output_bytes}});
  }
  return json{{"execs", std::move(list)}};
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
  return SignalExec(who, id, exec_id, it->second);
}

Status Api::SignalExec(const Principal& who, const std::string& id, const std::string& exec_id,
                       int signal) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  return node->SignalExec(id, exec_id, signal);
}

Result<Api::DesktopTarget> Api::Desktop(const Principal& who, const std::string& id, const char* op,
                                        RateGate* gate) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (!sb.spec.display)
    return Status(Code::kConflict, op, id,
                  "the sandbox has no display (create it with `display`: {\"width\", \"height\"})");
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, op, id, std::string("sandbox is ") + StateName(sb.state));
  int retry = 0;
  if (!gate->Take(id, &retry))
    return Status(Code::kQuota, op, id, "too many requests for this sandbox's screen")
        .WithRetryAfter(retry);
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  return DesktopTarget{std::move(sb), node};
}

Result<std::string> Api::Screen(const Principal& who, const std::string& id) {
  DesktopTarget t = WARREN_TRY(Desktop(who, id, "take a screenshot", &screen_rate_));
  return t.node->Screenshot(id);
}

Status Api::Input(const Principal& who, const std::string& id, const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  // A malformed request is a 400 whatever the sandbox; then the points are checked against
  // its own screen.
  using agent::DisplaySize;
  WARREN_RETURN_IF_ERROR(
      ParseInputActions(j, DisplaySize{DisplaySize::kMaxWidth, DisplaySize::kMaxHeight}).status());
  DesktopTarget t = WARREN_TRY(Desktop(who, id, "send input", &input_rate_));
  auto steps = WARREN_TRY(ParseInputActions(j, *t.sb.spec.display));
  return t.node->DesktopInput(id, steps);
}

Status Api::WriteExecInput(const Principal& who, const std::string& id, const std::string& exec_id,
                           const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  return WriteExecInput(who, id, exec_id, WARREN_TRY(ParseExecInput(j)));
}

Status Api::WriteExecInput(const Principal& who, const std::string& id, const std::string& exec_id,
                           const ExecInput& in) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, "write input", id,
                  std::string("sandbox is ") + StateName(sb.state));
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  return node->WriteExecStdin(id, exec_id, in.data, in.eof);
}

Status Api::ResizeExec(const Principal& who, const std::string& id, const std::string& exec_id,
                       const std::string& body) {
  json j = WARREN_TRY(ParseJsonBody(body));
  auto size = node::ParseWireTerminalSize(j);
  if (!size.ok()) return Invalid(size.status().message());
  return ResizeExec(who, id, exec_id, *size);
}

Status Api::ResizeExec(const Principal& who, const std::string& id, const std::string& exec_id,
                       node::TerminalSize size) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, "resize terminal", id,
                  std::string("sandbox is ") + StateName(sb.state));
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  return node->ResizeExec(id, exec_id, size);
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
  return WriteFile(who, id, path, mode, body);
}

Status Api::WriteFile(const Principal& who, const std::string& id, const std::string& path,
                      uint32_t mode, std::string_view data) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, "write file", id,
                  std::string("sandbox is ") + StateName(sb.state));
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  return node->WriteFile(id, path, mode, data);
}

namespace {

// Starts `argv` in sandbox `id` as its root and waits until it ends (killed at `timeout_ms`).
Result<std::shared_ptr<node::ExecRecord>> StartAndWait(node::NodeApi* node, const std::string& id,
                                                       const std::string& what,
                                                       std::vector<std::string> argv,
                                                       const std::string* stdin_data,
                                                       uint64_t max_output, int timeout_ms) {
  node::ExecSpec es;
  es.argv = std::move(argv);
  es.timeout_ms = timeout_ms;
  es.max_output = max_output;
  es.binary = true;
  if (stdin_data) {
    es.has_stdin = true;
    es.stdin_data = *stdin_data;
  }
  auto rec = WARREN_TRY(node->StartExec(id, NewExecId(), es));
  if (!rec->WaitDone(timeout_ms + 10000)) return Status(Code::kUnavailable, what, id, "timed out");
  return rec;
}

}  // namespace

Result<std::shared_ptr<node::ExecRecord>> Api::RunInSandbox(const Principal& who,
                                                            const std::string& id,
                                                            std::vector<std::string> argv,
                                                            const std::string* stdin_data,
                                                            uint64_t max_output, int timeout_ms) {
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (sb.state != SandboxState::kRunning)
    return Status(Code::kConflict, "run in sandbox", id,
                  std::string("sandbox is ") + StateName(sb.state));
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  return StartAndWait(node, id, "run in sandbox", std::move(argv), stdin_data, max_output,
                      timeout_ms);
}

namespace {

// Runs argv in the sandbox (as its root, inside its namespaces: the host never resolves a
// sandbox path) and waits; errors name `what`.
Result<std::shared_ptr<node::ExecRecord>> RunTool(node::NodeApi* node, const std::string& id,
                                                  const std::string& what,
                                                  std::vector<std::string> argv,
                                                  const std::string* stdin_data,
                                                  uint64_t max_output) {
  auto rec =
      WARREN_TRY(StartAndWait(node, id, what, std::move(argv), stdin_data, max_output, 300000));
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
Result<Api::RunningTarget> Api::RunningPath(const Principal& who, const std::string& id,
                                            const Query& q, const char* op) {
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
  return RunningTarget{path, WARREN_TRY(NodeOf(sb))};
}

Status Api::PutArchive(const Principal& who, const std::string& id, const Query& q,
                       const std::string& body) {
  const RunningTarget target = WARREN_TRY(RunningPath(who, id, q, "put archive"));
  const std::string& path = target.path;
  (void)WARREN_TRY(
      RunTool(target.node, id, "unpack archive into " + path,
              {"/bin/sh", "-c", "mkdir -p -- \"$1\" && exec tar -x -f - -C \"$1\"", "sh", path},
              &body, 64 << 10));
  return Status::Ok();
}

Result<std::string> Api::GetArchive(const Principal& who, const std::string& id, const Query& q) {
  const RunningTarget target = WARREN_TRY(RunningPath(who, id, q, "get archive"));
  const std::string& path = target.path;
  auto rec = WARREN_TRY(RunTool(target.node, id, "archive " + path,
                                {"tar", "-c", "-f", "-", "-C", path, "."}, nullptr, kMaxFileBytes));
  if (rec->ResultJson().value("stdout_truncated", false))
    return Invalid(
        "the directory as tar is larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB",
        path);
  return rec->RawOutput(1);
}

Result<std::string> Api::GetFile(const Principal& who, const std::string& id, const Query& q) {
  const RunningTarget target = WARREN_TRY(RunningPath(who, id, q, "read file"));
  return target.node->ReadFile(id, target.path, kMaxFileBytes);
}

Result<json> Api::UploadLayer(const Query& q, const std::string& body_path) {
  return layers_.Upload(q, body_path);
}

Result<json> Api::ListLayers() { return layers_.List(); }

Status Api::DeleteLayer(const std::string& ref) { return layers_.Delete(ref); }

Result<json> Api::InspectLayer(const std::string& ref) {
  json j = WARREN_TRY(layers_.Get(ref));
  const std::string digest = j.value("digest", std::string());
  json nodes = json::array();
  for (const json& info : fleet_->Infos()) {
    const json lod = info.value("layers_on_demand", json::object());
    if (!lod.is_object() || !lod.contains("layers") || !lod["layers"].is_array()) continue;
    for (const json& l : lod["layers"])
      if (l.is_object() && l.value("layer", std::string()) == digest) {
        json n = l;
        n.erase("layer");
        n["node"] = info.value("name", std::string());
        nodes.push_back(std::move(n));
      }
  }
  j["on_demand"] = std::move(nodes);
  return j;
}

void Api::SweepBlobs() { layers_.Sweep(); }

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

void Api::SetCalls(fncall::Calls* calls) { calls_.SetService(calls); }

void Api::StopCalls() { calls_.Stop(); }

Result<json> Api::Call(const Principal& who, const std::string& body) {
  return calls_.Call(who, body);
}

Result<json> Api::CallBatch(const Principal& who, const std::string& body) {
  return calls_.CallBatch(who, body);
}

json Api::Nodes() {
  json nodes = json::array();
  for (json& n : fleet_->Infos()) nodes.push_back(std::move(n));
  return {{"nodes", nodes}};
}

Result<json> Api::SetNodeAdmin(const std::string& node, NodeAdmin action) {
  const bool drain = action == NodeAdmin::kDrain;
  WARREN_RETURN_IF_ERROR(fleet_->SetNodeAdmin(node, action != NodeAdmin::kUncordon, drain));
  json out = {{"node", node},
              {"state", drain                          ? "draining"
                        : action == NodeAdmin::kCordon ? "cordoned"
                                                       : "ready"},
              {"deleted", 0},
              {"errors", json::array()}};
  if (!drain) return out;
  int deleted = 0;
  for (const SandboxRecord& sb : sandboxes_.List()) {
    if (sb.node != node || sb.state == SandboxState::kCreating) continue;
    Status st = DeleteSandbox(System(), sb.id);
    if (st.ok() || st.code() == Code::kNotFound)
      ++deleted;
    else
      out["errors"].push_back({{"id", sb.id}, {"error", st.ToString()}});
  }
  out["deleted"] = deleted;
  return out;
}

FleetSample Api::SampleCounters() const {
  FleetSample s;
  const Histogram::Totals creates = create_seconds_.totals(), execs = exec_seconds_.totals();
  s.creates = creates.count;
  s.create_seconds = creates.sum;
  s.execs = execs.count;
  s.exec_seconds = execs.sum;
  s.calls = calls_.stats().admitted;
  for (const auto& [key, n] : sandboxes_.counts())
    if (n > 0) s.sandboxes[std::string(StateName(key.second))] += n;
  return s;
}

json Api::Stats() {
  json history = json::array();
  for (const FleetSample& s : history_.Samples())
    history.push_back({{"at", Rfc3339(s.unix_time)},
                       {"creates", s.creates},
                       {"create_seconds", s.create_seconds},
                       {"execs", s.execs},
                       {"exec_seconds", s.exec_seconds},
                       {"calls", s.calls},
                       {"sandboxes", s.sandboxes}});
  const CallGate::Stats calls = calls_.stats();
  // The runner pools are the nodes' (a cluster's API servers only send calls on): as each
  // node reports its own, labelled with the node.
  json runners = json::array();
  for (const json& info : fleet_->Infos()) {
    auto fncall = info.find("fncall");
    if (fncall == info.end() || !fncall->is_object() || !fncall->contains("runners")) continue;
    for (json r : (*fncall)["runners"]) {
      r["node"] = info.value("name", "");
      runners.push_back(std::move(r));
    }
  }
  return {{"interval_s", std::chrono::duration<double>(history_.interval()).count()},
          {"history", std::move(history)},
          {"calls",
           {{"enabled", calls_.enabled()},
            {"admitted", calls.admitted},
            {"refused", calls.refused},
            {"verdicts", calls.verdicts},
            {"runners", std::move(runners)}}}};
}

std::string Api::Metrics() {
  std::ostringstream o;
  o << RenderSandboxMetrics(sandboxes_.counts());
  o << create_seconds_.Render("warren_create_seconds");
  o << exec_seconds_.Render("warren_exec_seconds");
  o << placement_seconds_.Render("warren_placement_seconds");
  o << calls_.RenderMetrics();
  o << errors_.Render();
  o << RenderNodeMetrics(fleet_->Infos());  // once: it walks each node's state
  return o.str();
}

}  // namespace warren::server
