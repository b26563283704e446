// Snapshot and fork (issue 30): the API's half. The node turns a sandbox's files into a layer
// (node::NodeApi::Snapshot); here that layer gets its name, or becomes the workspace of N new
// sandboxes made as a batch is, all or none.
#include <spdlog/spdlog.h>

#include "base/cleanup.h"
#include "base/ids.h"
#include "node/node_api.h"
#include "server/routes.h"

namespace warren::server {

using nlohmann::json;

namespace {

constexpr int64_t kMaxFork = 1000;

// The fields of a snapshot or fork request: each known, each of its type.
Status CheckFields(const json& j, std::initializer_list<const char*> known, const char* what) {
  if (!j.is_object()) return Invalid(std::string(what) + " request must be a JSON object");
  for (const auto& [k, v] : j.items()) {
    bool ok = false;
    for (const char* f : known) ok = ok || k == f;
    if (!ok) return Invalid("unknown field `" + k + "` in " + what + " request");
  }
  if (j.contains("tag") && !j["tag"].is_string()) return Invalid("`tag` must be a NAME:TAG string");
  return Status::Ok();
}

}  // namespace

Result<node::SnapshotLayer> Api::SnapshotOf(const SandboxRecord& sb, uint64_t max_bytes) {
  node::SnapshotSpec ns;
  if (!sb.layers.empty() && sb.layers.front().role == "workspace")
    ns.workspace = sb.layers.front().digest;
  // By default what the sandbox could hold: its disk quota (its writable layer's size) and its
  // workspace layer. Files count at their apparent size (a sparse file's image is dense).
  ns.max_bytes = max_bytes;
  if (ns.max_bytes == 0)
    ns.max_bytes =
        (sb.spec.disk_mb << 20) + (ns.workspace.empty() ? 0 : layers_.Bytes(ns.workspace));
  node::NodeApi* node = WARREN_TRY(NodeOf(sb));
  auto layer = node->Snapshot(sb.id, ns);
  if (!layer.ok()) return node::NodeFault(layer.status());
  return layer;
}

Result<json> Api::Snapshot(const Principal& who, const std::string& id, const std::string& body) {
  const double t0 = NowSeconds();
  if (!who.Allows("image:write"))
    return Status(Code::kForbidden, "snapshot", id, "the token needs scope image:write too");
  json j = WARREN_TRY(ParseJsonBody(body));
  WARREN_RETURN_IF_ERROR(CheckFields(j, {"tag", "max_mb"}, "snapshot"));
  if (!j.contains("tag")) return Invalid("`tag` (NAME:TAG) is required: it names the snapshot");
  const std::string ref = j["tag"].get<std::string>();
  std::string name, tag;
  WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
  uint64_t max_bytes = 0;
  if (j.contains("max_mb")) {
    if (!j["max_mb"].is_number_unsigned() || j["max_mb"].get<uint64_t>() == 0 ||
        j["max_mb"].get<uint64_t>() > (1ull << 24))
      return Invalid("`max_mb` must be an integer from 1 to 16777216");
    max_bytes = j["max_mb"].get<uint64_t>() << 20;
  }
  SandboxRecord sb = WARREN_TRY(Sandbox(who, id));
  if (!IsLive(sb.state))
    return Status(Code::kConflict, "snapshot", id,
                  std::string("sandbox is ") + StateName(sb.state));
  // The blob is named before any collection can see it unnamed.
  auto pin = layers_.PinBlobs();
  const node::SnapshotLayer layer = WARREN_TRY(SnapshotOf(sb, max_bytes));
  std::string moved_from;
  auto named =
      layers_.NameSnapshot(ref, layer.digest, layer.size, "snapshot of " + id, &moved_from);
  pin.unlock();
  if (!named.ok()) {
    layers_.Collect({layer.digest});  // named by nothing
    return named.status();
  }
  json out = std::move(*named);
  if (!moved_from.empty()) layers_.Collect({moved_from});
  out["snapshot"] = {{"sandbox", id},
                     {"entries", layer.entries},
                     {"file_bytes", layer.file_bytes},
                     {"whiteouts", layer.whiteouts},
                     {"seconds", NowSeconds() - t0}};
  spdlog::info("snapshot of {}: {} ({} entries, {} file bytes) in {:.3f} s", id, ref, layer.entries,
               layer.file_bytes, NowSeconds() - t0);
  return out;
}

Result<json> Api::Fork(const Principal& who, const std::string& id, const std::string& body) {
  const double t0 = NowSeconds();
  json j = WARREN_TRY(ParseJsonBody(body));
  WARREN_RETURN_IF_ERROR(CheckFields(j, {"count", "tag"}, "fork"));
  if (!j.contains("count") || !j["count"].is_number_integer() || j["count"].get<int64_t>() < 1 ||
      j["count"].get<int64_t>() > kMaxFork)
    return Invalid("`count` must be an integer from 1 to " + std::to_string(kMaxFork));
  const int64_t n = j["count"].get<int64_t>();
  std::string ref;
  if (j.contains("tag")) {
    if (!who.Allows("image:write"))
      return Status(Code::kForbidden, "fork", id, "naming the snapshot needs scope image:write");
    ref = j["tag"].get<std::string>();
    std::string name, tag;
    WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
  }
  SandboxRecord parent = WARREN_TRY(Sandbox(who, id));
  if (parent.state == SandboxState::kPaused)
    return Status(Code::kConflict, "fork", id, "sandbox is paused; resume it first");
  if (parent.state != SandboxState::kRunning)
    return Status(Code::kConflict, "fork", id,
                  std::string("sandbox is ") + StateName(parent.state));
  if (parent.spec.backend == runtime::BackendKind::kFncall)
    return Status(Code::kConflict, "fork", id,
                  "a fncall sandbox keeps nothing between runs: create more of its image");

  // The children's spec: the parent's (limits, network, filesystem policy, display, lease,
  // labels); a trajectory belongs to one sandbox.
  SandboxSpec spec = parent.spec;
  spec.trajectory.reset();
  spec.workspace = ref.empty() ? std::nullopt : std::optional<std::string>(ref);

  // Every child's share first: a fork beyond the quota makes nothing.
  std::vector<Result<json>> results(static_cast<size_t>(n));
  std::vector<bool> reserved = WARREN_TRY(ReserveShares(who, spec, n, &results));
  for (int64_t i = 0; i < n; ++i)
    if (!reserved[static_cast<size_t>(i)]) {
      ReleaseShares(who, spec, reserved);
      Status why = results[static_cast<size_t>(i)].status();
      return Status(why.code(), "fork", id,
                    "a fork of " + std::to_string(n) + " is beyond the quota: " + why.message())
          .WithRetryAfter(why.retry_after_s());
    }

  // A microVM forks with its memory and processes where its node can (the files alone
  // otherwise: a cold-booted VM, a node that cannot); everything else forks its files.
  std::optional<node::MemoryFork> memory;
  node::NodeApi* node = nullptr;
  if (parent.spec.backend == runtime::BackendKind::kMicrovm) {
    auto found = NodeOf(parent);
    auto prepared =
        found.ok() ? (*found)->PrepareFork(id) : Result<node::MemoryFork>(found.status());
    if (prepared.ok()) {
      memory = std::move(*prepared);
      node = *found;
    } else if (prepared.status().code() == Code::kUnavailable) {
      spdlog::info("fork of {}: files only: {}", id, prepared.status().ToString());
    } else {
      ReleaseShares(who, spec, reserved);
      return node::NodeFault(prepared.status());
    }
  }
  Cleanup end_fork([&] {
    if (memory) (void)node->EndFork(memory->token);
  });

  // The snapshot: the children's workspace in a files fork; in a memory fork only when it is
  // to be named (the children's files are in the memory they restore, over the parent's disks).
  auto pin = layers_.PinBlobs();
  std::optional<node::SnapshotLayer> layer;
  if (!memory || !ref.empty()) {
    auto made = SnapshotOf(parent, 0);
    if (!made.ok()) {
      ReleaseShares(who, spec, reserved);
      return made.status();
    }
    layer = std::move(*made);
  }
  std::string moved_from;
  if (!ref.empty()) {
    auto named =
        layers_.NameSnapshot(ref, layer->digest, layer->size, "snapshot of " + id, &moved_from);
    if (!named.ok()) {
      ReleaseShares(who, spec, reserved);
      pin.unlock();
      layers_.Collect({layer->digest});
      return named.status();
    }
  }
  const double snapshot_s = NowSeconds() - t0;
  ForkOrigin origin;
  origin.lineage.parent = id;
  origin.below = parent.layers;
  if (layer) origin.lineage.snapshot = layer->digest, origin.lineage.snapshot_ref = ref;
  if (memory) {
    origin.lineage.memory = true;
    origin.node = parent.node;
    origin.memory = memory->token;
  } else if (!origin.below.empty() && origin.below.front().role == "workspace") {
    origin.below.erase(origin.below.begin());  // the snapshot holds it
  }
  // The pin is held until every child is made: their records keep the snapshot from then on.
  RunCreates(who, spec, reserved, &results, &origin);
  pin.unlock();
  end_fork.Run();
  if (!moved_from.empty()) layers_.Collect({moved_from});
  // A child's create does not apply its lease's expiry (Collect would wait for the pin):
  // done here, for all of them, as the creates would have.
  if (spec.lease && !leases_.Get(who, *spec.lease).ok()) ExpireLease(*spec.lease);

  json made = json::array();
  std::optional<Status> failed;
  for (auto& r : results) {
    if (r.ok())
      made.push_back(std::move(*r));
    else if (!failed)
      failed = r.status();
  }
  if (failed) {
    // All or none: the children made go again, and with them (unless named) the snapshot.
    std::string kept;
    for (const json& c : made) {
      const std::string child = c.value("id", std::string());
      Status st = DeleteSandbox(who, child);
      if (!st.ok() && st.code() != Code::kNotFound) {
        spdlog::warn("fork of {}: child {} not deleted after the fork failed: {}", id, child,
                     st.ToString());
        kept += (kept.empty() ? "" : ", ") + child;
      }
    }
    if (layer) layers_.Collect({layer->digest});
    CountError(failed->code());
    return Status(failed->code(), "fork", id,
                  std::to_string(made.size()) + " of " + std::to_string(n) +
                      " children were made, then removed" +
                      (kept.empty() ? "" : " (but " + kept + ": delete them)") + ": " +
                      failed->message());
  }
  spdlog::info("fork of {}: {} children{} in {:.3f} s ({} {:.3f} s)", id, n,
               memory ? " with its memory" : "", NowSeconds() - t0, memory ? "capture" : "snapshot",
               snapshot_s);
  json out{{"sandboxes", std::move(made)}, {"seconds", NowSeconds() - t0}};
  if (layer)
    out["snapshot"] = {{"ref", ref},
                       {"digest", layer->digest},
                       {"size", layer->size},
                       {"entries", layer->entries},
                       {"file_bytes", layer->file_bytes},
                       {"seconds", snapshot_s}};
  out["memory"] = memory
                      ? json{{"ram_bytes", memory->ram_bytes},
                             {"paused_seconds", static_cast<double>(memory->paused_ms) / 1000.0},
                             {"capture_seconds", static_cast<double>(memory->capture_ms) / 1000.0}}
                      : json(nullptr);
  return out;
}

}  // namespace warren::server
