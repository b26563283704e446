#include "server/sandbox_record.h"

#include <set>

namespace warren::server {

const char* StateName(SandboxState s) {
  switch (s) {
    case SandboxState::kCreating:
      return "creating";
    case SandboxState::kRunning:
      return "running";
    case SandboxState::kPaused:
      return "paused";
    case SandboxState::kStopping:
      return "stopping";
    case SandboxState::kFailed:
      return "failed";
    case SandboxState::kLost:
      return "lost";
  }
  return "failed";
}

Result<SandboxState> ParseSandboxState(std::string_view name) {
  for (SandboxState s : kAllSandboxStates)
    if (name == StateName(s)) return s;
  return Invalid("unknown sandbox state `" + std::string(name) + "`");
}

bool CanMove(SandboxState from, SandboxState to) {
  using S = SandboxState;
  switch (from) {
    case S::kCreating:
      return to == S::kRunning || to == S::kFailed || to == S::kLost;
    case S::kRunning:
      return to == S::kPaused || to == S::kStopping || to == S::kFailed || to == S::kLost;
    case S::kPaused:
      return to == S::kRunning || to == S::kStopping || to == S::kFailed || to == S::kLost;
    // Back where it was when the node could not delete it; failed when it never was live.
    case S::kStopping:
      return to == S::kRunning || to == S::kPaused || to == S::kFailed || to == S::kLost;
    case S::kFailed:
      return false;  // it is only removed
    // Its node came back and still runs it (running, paused), or does not (failed).
    case S::kLost:
      return to == S::kRunning || to == S::kPaused || to == S::kFailed;
  }
  return false;
}

namespace {

// The record's own fields; every other field belongs to the spec.
const std::set<std::string> kOwnFields = {"id",     "owner",  "node",  "created_at",
                                          "state",  "layers", "error", "replay_stopped",
                                          "reason", "lineage"};

Status RequireString(const json& j, const char* key, std::string* out) {
  if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
    return Invalid(std::string("sandbox record: `") + key + "` must be a non-empty string");
  *out = j[key].get<std::string>();
  return Status::Ok();
}

}  // namespace

Result<SandboxRecord> ParseSandboxRecord(const json& j) {
  if (!j.is_object()) return Invalid("sandbox record must be a JSON object");
  SandboxRecord r;
  WARREN_RETURN_IF_ERROR(RequireString(j, "id", &r.id));
  WARREN_RETURN_IF_ERROR(RequireString(j, "owner", &r.owner));
  WARREN_RETURN_IF_ERROR(RequireString(j, "node", &r.node));
  WARREN_RETURN_IF_ERROR(RequireString(j, "created_at", &r.created_at));
  std::string state;
  WARREN_RETURN_IF_ERROR(RequireString(j, "state", &state));
  r.state = WARREN_TRY(ParseSandboxState(state));
  json spec = json::object();
  for (const auto& [k, v] : j.items())
    if (!kOwnFields.count(k)) spec[k] = v;
  auto parsed = ParseSandboxSpec(spec);
  if (!parsed.ok()) return parsed.status().Context("sandbox record " + r.id);
  r.spec = std::move(*parsed);
  if (!j.contains("layers") || !j["layers"].is_array())
    return Invalid("sandbox record: `layers` must be an array");
  for (const auto& l : j["layers"]) {
    if (!l.is_object() || !l.contains("digest") || !l["digest"].is_string() ||
        !l.contains("role") || !l["role"].is_string() || !l.contains("ref") ||
        !l["ref"].is_string() || l.size() != 3)
      return Invalid("sandbox record: each of `layers` is {ref, role, digest}");
    r.layers.push_back({l["ref"].get<std::string>(), l["role"].get<std::string>(),
                        l["digest"].get<std::string>()});
  }
  if (!j.contains("error")) return Invalid("sandbox record: `error` is missing");
  if (!j["error"].is_null()) {
    const json& e = j["error"];
    if (!e.is_object() || !e.contains("code") || !e["code"].is_string() || !e.contains("message") ||
        !e["message"].is_string() || e.size() != 2)
      return Invalid("sandbox record: `error` is null or {code, message}");
    r.error = SandboxRecord::Error{e["code"].get<std::string>(), e["message"].get<std::string>()};
  }
  if (j.contains("reason")) {
    if (!j["reason"].is_string()) return Invalid("sandbox record: `reason` must be a string");
    r.reason = j["reason"].get<std::string>();
  }
  if ((r.state == SandboxState::kLost) != r.reason.has_value())
    return Invalid("sandbox record: `reason` goes with state `lost`, and only with it");
  if (j.contains("replay_stopped")) {
    if (!j["replay_stopped"].is_string())
      return Invalid("sandbox record: `replay_stopped` must be a string");
    r.replay_stopped = j["replay_stopped"].get<std::string>();
  }
  if (j.contains("lineage")) {
    // {parent, memory, snapshot?: {ref, digest}}: a files fork has its snapshot; a memory
    // fork has one only when it was named too.
    const json& l = j["lineage"];
    const char* shape = "sandbox record: `lineage` is {parent, memory, snapshot?: {ref, digest}}";
    if (!l.is_object() || !l.contains("parent") || !l["parent"].is_string()) return Invalid(shape);
    SandboxRecord::Lineage lin;
    lin.parent = l["parent"].get<std::string>();
    for (const auto& [k, v] : l.items()) {
      if (k == "parent") continue;
      if (k == "memory" && v.is_boolean()) {
        lin.memory = v.get<bool>();
      } else if (k == "snapshot" && v.is_object() && v.size() == 2 && v.contains("ref") &&
                 v["ref"].is_string() && v.contains("digest") && v["digest"].is_string()) {
        lin.snapshot = v["digest"].get<std::string>();
        lin.snapshot_ref = v["ref"].get<std::string>();
      } else {
        return Invalid(shape);
      }
    }
    if (lin.snapshot.empty() && !lin.memory) return Invalid(shape);
    r.lineage = std::move(lin);
  }
  return r;
}

json ToJson(const SandboxRecord& r) {
  json j = ToJson(r.spec);
  j["id"] = r.id;
  j["owner"] = r.owner;
  j["node"] = r.node;
  j["created_at"] = r.created_at;
  j["state"] = StateName(r.state);
  json layers = json::array();
  for (const auto& l : r.layers)
    layers.push_back({{"ref", l.ref}, {"role", l.role}, {"digest", l.digest}});
  j["layers"] = std::move(layers);
  j["error"] =
      r.error ? json{{"code", r.error->code}, {"message", r.error->message}} : json(nullptr);
  if (r.replay_stopped) j["replay_stopped"] = *r.replay_stopped;
  if (r.reason) j["reason"] = *r.reason;
  if (r.lineage) {
    json l = {{"parent", r.lineage->parent}, {"memory", r.lineage->memory}};
    if (!r.lineage->snapshot.empty())
      l["snapshot"] = {{"ref", r.lineage->snapshot_ref}, {"digest", r.lineage->snapshot}};
    j["lineage"] = std::move(l);
  }
  return j;
}

}  // namespace warren::server
