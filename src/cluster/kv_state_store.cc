#include "cluster/kv_state_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "base/ids.h"
#include "cluster/idle_index.h"
#include "cluster/keys.h"
#include "cluster/node_record.h"
#include "server/shares.h"

namespace warren::cluster {
namespace {

using nlohmann::json;
using server::LayerRecord;

json LayerJson(const LayerRecord& r) {
  return {{"name", r.name},    {"tag", r.tag},   {"digest", r.digest},
          {"kind", r.kind},    {"size", r.size}, {"created_at", r.created_at},
          {"source", r.source}};
}

Result<LayerRecord> ParseLayer(const json& j) {
  if (!j.is_object()) return Internal("read layer record", "", "not an object");
  LayerRecord r;
  try {
    r.name = j.at("name").get<std::string>();
    r.tag = j.at("tag").get<std::string>();
    r.digest = j.at("digest").get<std::string>();
    r.kind = j.at("kind").get<std::string>();
    r.size = j.at("size").get<uint64_t>();
    r.created_at = j.at("created_at").get<std::string>();
    r.source = j.at("source").get<std::string>();
  } catch (const json::exception& e) {
    return Internal("read layer record", "", e.what());
  }
  return r;
}

// etcd refuses a request over 1.5 MiB (--max-request-bytes): say so rather than pass on its
// gateway's message.
constexpr size_t kMaxValueBytes = 1'400'000;

Status CheckSize(const std::string& value, const std::string& what, const std::string& id) {
  if (value.size() <= kMaxValueBytes) return Status::Ok();
  return Invalid(what + " is " + std::to_string(value.size()) +
                     " bytes; the cluster store takes at most " + std::to_string(kMaxValueBytes),
                 id);
}

// When the sandbox's ttl_s ends (Unix ms), from fields that never change after the insert.
std::optional<int64_t> DeadlineMs(const json& sandbox) {
  const double created = ParseRfc3339(sandbox.value("created_at", ""));
  const int64_t ttl_s = sandbox.value("ttl_s", int64_t{0});
  if (created <= 0 || ttl_s <= 0) return std::nullopt;
  return std::llround(created * 1000) + ttl_s * 1000;
}

}  // namespace

std::vector<json> KvStateStore::ListJson(const std::string& prefix, const char* what) {
  std::vector<json> out;
  auto listed = kv_->List(prefix);
  if (!listed.ok()) {
    spdlog::error("list {}: {}", what, listed.status().ToString());
    return out;
  }
  for (const auto& item : listed->kvs) {
    auto j = json::parse(item.value, nullptr, false);
    if (j.is_discarded()) {
      spdlog::error("list {}: {} is not JSON; left out", what, item.key);
      continue;
    }
    out.push_back(std::move(j));
  }
  return out;
}

Result<json> KvStateStore::GetJson(const std::string& key, const std::string& kind,
                                   const std::string& id) {
  auto item = kv_->Get(key);
  if (!item.ok()) {
    if (item.status().code() == Code::kNotFound) return NotFound(kind, id);
    return item.status();
  }
  auto j = json::parse(item->value, nullptr, false);
  if (j.is_discarded()) return Internal("read " + kind, id, "the stored record is not JSON");
  return j;
}

std::vector<TxnOp> KvStateStore::RecordOps(const json& sandbox, const std::string& value,
                                           bool inserting) {
  const std::string id = sandbox.value("id", "");
  const std::string owner = sandbox.value("owner", "");
  const std::string state = sandbox.value("state", "");
  std::vector<TxnOp> ops{TxnOp::Put(keys::Sandbox(id), value)};
  if (auto deadline = DeadlineMs(sandbox); inserting && deadline)
    ops.push_back(TxnOp::Put(keys::Expiry(*deadline, id), ""));
  // The first idle deadline: creation is the sandbox's first use.
  const double created = ParseRfc3339(sandbox.value("created_at", ""));
  if (const int64_t idle_ms = IdleTimeoutMsOf(sandbox); inserting && idle_ms > 0 && created > 0) {
    for (TxnOp& op :
         IdleInsertOps(id, IdleDeadlineMs(std::llround(created * 1000), idle_ms), idle_ms))
      ops.push_back(std::move(op));
  }
  if (server::HoldsShare(state))
    ops.push_back(TxnOp::Put(keys::Share(owner, id),
                             json{{"cpu", sandbox.value("cpu", 1.0)},
                                  {"memory_mb", sandbox.value("memory_mb", int64_t{0})}}
                                 .dump()));
  else
    ops.push_back(TxnOp::Delete(keys::Share(owner, id)));
  if (state == "creating") {
    // The same claim placement wrote with the reservation (cluster_fleet.cc).
    const Resources each{std::llround(sandbox.value("cpu", 1.0) * 1000),
                         sandbox.value("memory_mb", int64_t{0}),
                         sandbox.value("disk_mb", int64_t{0})};
    ops.push_back(
        TxnOp::Put(keys::Creating(id),
                   ToJson(CreateClaim{api_server_, sandbox.value("node", ""), each}).dump()));
  } else
    ops.push_back(TxnOp::Delete(keys::Creating(id)));
  return ops;
}

Status KvStateStore::PutSandbox(const json& sandbox) {
  const std::string id = sandbox.value("id", "");
  if (id.empty()) return Invalid("put sandbox: no id");
  const std::string value = sandbox.dump();
  WARREN_RETURN_IF_ERROR(CheckSize(value, "the sandbox record", id));
  Txn txn;
  txn.success = RecordOps(sandbox, value, /*inserting=*/true);  // idempotent: same key
  return kv_->Commit(txn).status();
}

Result<json> KvStateStore::GetSandbox(const std::string& id) {
  return GetJson(keys::Sandbox(id), "sandbox", id);
}

Result<std::string> KvStateStore::GetSandboxText(const std::string& id) {
  auto item = kv_->Get(keys::Sandbox(id));
  if (!item.ok()) {
    if (item.status().code() == Code::kNotFound) return NotFound("sandbox", id);
    return item.status();
  }
  return std::move(item->value);
}

std::vector<json> KvStateStore::ListSandboxes() {
  auto all = ReadSandboxes();
  if (!all.ok()) {
    spdlog::error("list sandboxes: {}", all.status().ToString());
    return {};
  }
  return std::move(*all);
}

Result<std::vector<json>> KvStateStore::ReadSandboxes() {
  auto listed = WARREN_TRY(kv_->List(keys::kSandboxes));
  std::vector<json> all;
  for (const auto& item : listed.kvs) {
    auto j = json::parse(item.value, nullptr, false);
    if (j.is_discarded()) {
      spdlog::error("list sandboxes: {} is not JSON; left out", item.key);
      continue;
    }
    all.push_back(std::move(j));
  }
  std::stable_sort(all.begin(), all.end(), [](const json& a, const json& b) {
    return std::make_pair(a.value("created_at", ""), a.value("id", "")) <
           std::make_pair(b.value("created_at", ""), b.value("id", ""));
  });
  return all;
}

Result<std::vector<server::StateStore::StoredText>> KvStateStore::ReadSandboxTexts() {
  auto listed = WARREN_TRY(kv_->List(keys::kSandboxes));
  std::vector<StoredText> out;
  out.reserve(listed.kvs.size());
  for (auto& item : listed.kvs)
    out.push_back({item.key.substr(keys::kSandboxes.size()), std::move(item.value)});
  return out;
}

Status KvStateStore::RemoveWith(const std::string& id, const std::vector<Compare>& compare) {
  auto item = kv_->Get(keys::Sandbox(id));
  if (!item.ok() && item.status().code() == Code::kNotFound)  // removing what is gone
    return compare.empty() ? Status::Ok()
                           : Status(Code::kConflict, "remove sandbox", id, "gone meanwhile");
  if (!item.ok()) return item.status();
  auto doc = json::parse(item->value, nullptr, false);
  const std::string owner = doc.is_object() ? doc.value("owner", "") : "";
  Txn txn;
  txn.compare = compare;
  // Its idle index entries go stale with idle-at and are dropped as they come due.
  txn.success = {TxnOp::Delete(keys::Sandbox(id)), TxnOp::Delete(keys::Share(owner, id)),
                 TxnOp::Delete(keys::Creating(id)), TxnOp::Delete(keys::IdleAt(id))};
  if (auto deadline = doc.is_object() ? DeadlineMs(doc) : std::nullopt)
    txn.success.push_back(TxnOp::Delete(keys::Expiry(*deadline, id)));
  auto r = WARREN_TRY(kv_->Commit(txn));
  if (!r.succeeded)
    return Status(Code::kConflict, "remove sandbox", id, "changed or gone meanwhile");
  return Status::Ok();
}

Status KvStateStore::RemoveSandbox(const std::string& id) { return RemoveWith(id, {}); }

Status KvStateStore::RemoveSandboxIf(const std::string& id, const std::string& stamp) {
  char* end = nullptr;
  const int64_t rev = std::strtoll(stamp.c_str(), &end, 10);
  if (stamp.empty() || !end || *end != '\0' || rev <= 0)
    return Invalid("remove sandbox: a stamp of another store");
  return RemoveWith(id, {Compare::ModIs(keys::Sandbox(id), rev)});
}

Result<server::StateStore::Stamped> KvStateStore::GetSandboxStamped(const std::string& id) {
  auto item = kv_->Get(keys::Sandbox(id));
  if (!item.ok()) {
    if (item.status().code() == Code::kNotFound) return NotFound("sandbox", id);
    return item.status();
  }
  auto j = json::parse(item->value, nullptr, false);
  if (j.is_discarded()) return Internal("read sandbox", id, "the stored record is not JSON");
  return Stamped{std::move(j), std::to_string(item->mod_revision)};
}

Result<std::string> KvStateStore::PutSandboxIf(const json& sandbox, const std::string& stamp) {
  const std::string id = sandbox.value("id", "");
  if (id.empty()) return Invalid("put sandbox: no id");
  int64_t rev = 0;
  if (!stamp.empty()) {
    char* end = nullptr;
    rev = std::strtoll(stamp.c_str(), &end, 10);
    if (!end || *end != '\0' || rev <= 0) return Invalid("put sandbox: a stamp of another store");
  }
  const std::string value = sandbox.dump();
  WARREN_RETURN_IF_ERROR(CheckSize(value, "the sandbox record", id));
  const std::string key = keys::Sandbox(id);
  Txn txn;
  txn.compare.push_back(rev == 0 ? Compare::Missing(key) : Compare::ModIs(key, rev));
  txn.success = RecordOps(sandbox, value, /*inserting=*/rev == 0);
  auto r = WARREN_TRY(kv_->Commit(txn));
  if (!r.succeeded)
    return Status(Code::kConflict, "put sandbox", id, rev == 0 ? "exists" : "changed meanwhile");
  return std::to_string(r.revision);  // the record's mod revision: it was written at it
}

Result<std::pair<server::Share, int64_t>> KvStateStore::ReadShare(const std::string& owner) {
  auto listed = WARREN_TRY(kv_->List(keys::Shares(owner)));
  server::Share share;
  for (const auto& item : listed.kvs) {
    auto j = json::parse(item.value, nullptr, false);
    if (!j.is_object()) return Internal("read share", item.key, "not a JSON object");
    share.sandboxes += 1;
    share.cpu += j.value("cpu", 0.0);
    share.memory_mb += j.value("memory_mb", int64_t{0});
  }
  return std::make_pair(share, listed.revision);
}

Result<server::Share> KvStateStore::ShareOf(const std::string& owner) {
  return WARREN_TRY(ReadShare(owner)).first;
}

Result<std::string> KvStateStore::InsertSandbox(const json& sandbox,
                                                const server::ShareLimits& limits) {
  if (!limits.any()) return PutSandboxIf(sandbox, "");
  const std::string id = sandbox.value("id", "");
  const std::string owner = sandbox.value("owner", "");
  if (id.empty()) return Invalid("put sandbox: no id");
  const std::string value = sandbox.dump();
  WARREN_RETURN_IF_ERROR(CheckSize(value, "the sandbox record", id));
  // Sum, check, and insert only if no share of the owner was written since the sum: a create
  // another replica granted meanwhile makes this one sum again.
  for (int attempt = 0; attempt < 64; ++attempt) {
    auto [share, revision] = WARREN_TRY(ReadShare(owner));
    WARREN_RETURN_IF_ERROR(server::AdmitShare(owner, limits, share, sandbox.value("cpu", 1.0),
                                              sandbox.value("memory_mb", int64_t{0})));
    Txn txn;
    txn.compare = {Compare::Missing(keys::Sandbox(id)),
                   Compare::NoneWrittenAfter(keys::Shares(owner), revision)};
    txn.success = RecordOps(sandbox, value, /*inserting=*/true);
    txn.failure = {TxnOp::Get(keys::Sandbox(id))};
    auto r = WARREN_TRY(kv_->Commit(txn));
    if (r.succeeded) return std::to_string(r.revision);
    if (!r.gets.empty() && !r.gets[0].kvs.empty())
      return Status(Code::kConflict, "put sandbox", id, "exists");
  }
  return Status(Code::kUnavailable, "create sandbox", owner,
                "too many concurrent creates of this owner; retry")
      .WithRetryAfter(1);
}

Result<std::vector<std::string>> KvStateStore::OrphanedCreates() {
  // Both at one revision: a replica that registered after the list cannot be missed.
  Txn txn;
  txn.success = {TxnOp::Get(keys::kCreating, PrefixEnd(keys::kCreating)),
                 TxnOp::Get(keys::kApiServers, PrefixEnd(keys::kApiServers))};
  auto r = WARREN_TRY(kv_->Commit(txn));
  if (r.gets.size() != 2) return Internal("list creates", "", "the store answered no ranges");
  std::set<std::string> alive;
  for (const auto& item : r.gets[1].kvs) alive.insert(keys::NameOf(item.key, keys::kApiServers));
  std::vector<std::string> out;
  for (const auto& item : r.gets[0].kvs) {
    auto j = json::parse(item.value, nullptr, false);
    const std::string maker = j.is_object() ? j.value("api_server", "") : "";
    if (!alive.count(maker)) out.push_back(keys::NameOf(item.key, keys::kCreating));
  }
  return out;
}

Status KvStateStore::PutLayer(const LayerRecord& rec) {
  return kv_->Put(keys::Layer(rec.name, rec.tag), LayerJson(rec).dump()).status();
}

Result<LayerRecord> KvStateStore::GetLayer(const std::string& name, const std::string& tag) {
  auto j = WARREN_TRY(GetJson(keys::Layer(name, tag), "image", name + ":" + tag));
  return ParseLayer(j);
}

std::vector<LayerRecord> KvStateStore::ListLayers() {
  std::vector<LayerRecord> out;
  for (const auto& j : ListJson(keys::kLayers, "layers")) {
    auto rec = ParseLayer(j);
    if (rec.ok()) out.push_back(std::move(*rec));
  }
  std::sort(out.begin(), out.end(), [](const LayerRecord& a, const LayerRecord& b) {
    return std::tie(a.name, a.tag) < std::tie(b.name, b.tag);
  });
  return out;
}

Status KvStateStore::RemoveLayer(const std::string& name, const std::string& tag) {
  const int64_t gone = WARREN_TRY(kv_->Delete(keys::Layer(name, tag)));
  return gone > 0 ? Status::Ok() : NotFound("image", name + ":" + tag);
}

int KvStateStore::LayerRefs(const std::string& digest) {
  int n = 0;
  for (const auto& rec : ListLayers()) n += rec.digest == digest;
  return n;
}

Status KvStateStore::PutDoc(const std::string& kind, const std::string& id, const json& doc) {
  const std::string value = doc.dump();
  WARREN_RETURN_IF_ERROR(CheckSize(value, "the " + kind, id));
  return kv_->Put(keys::Doc(kind, id), value).status();
}

Result<json> KvStateStore::GetDoc(const std::string& kind, const std::string& id) {
  return GetJson(keys::Doc(kind, id), kind, id);
}

Result<std::vector<json>> KvStateStore::ListDocs(const std::string& kind) {
  auto listed = WARREN_TRY(kv_->List(keys::Docs(kind)));
  std::vector<json> out;
  for (const auto& item : listed.kvs) {
    auto j = json::parse(item.value, nullptr, false);
    if (j.is_discarded()) return Internal("list " + kind, item.key, "a stored value is not JSON");
    out.push_back(std::move(j));
  }
  return out;
}

Status KvStateStore::RemoveDoc(const std::string& kind, const std::string& id) {
  const int64_t gone = WARREN_TRY(kv_->Delete(keys::Doc(kind, id)));
  return gone > 0 ? Status::Ok() : NotFound(kind, id);
}

Status KvStateStore::InsertStep(const std::string& traj, int64_t step, const std::string& exec_id,
                                const json& doc) {
  const std::string key = keys::Step(traj, step);
  const std::string value = json{{"exec_id", exec_id}, {"doc", doc}}.dump();
  WARREN_RETURN_IF_ERROR(CheckSize(value, "the trajectory step", traj));
  // The step and its exec's index in one transaction: both or neither.
  Txn txn;
  txn.compare.push_back(Compare::Missing(key));
  txn.success.push_back(TxnOp::Put(key, value));
  txn.success.push_back(
      TxnOp::Put(keys::StepByExec(exec_id), json{{"traj", traj}, {"step", step}}.dump()));
  auto r = WARREN_TRY(kv_->Commit(txn));
  if (!r.succeeded) return Status(Code::kConflict, "record step", traj, "step already recorded");
  return Status::Ok();
}

Result<json> KvStateStore::GetStep(const std::string& traj, int64_t step) {
  auto j = WARREN_TRY(GetJson(keys::Step(traj, step), "step " + std::to_string(step), traj));
  if (!j.contains("doc")) return Internal("read step", traj, "the stored step has no doc");
  return j["doc"];
}

Status KvStateStore::UpdateStep(const std::string& traj, int64_t step, const json& doc) {
  const std::string key = keys::Step(traj, step);
  auto item = kv_->Get(key);
  if (!item.ok()) {
    if (item.status().code() == Code::kNotFound)
      return NotFound("step " + std::to_string(step), traj);
    return item.status();
  }
  auto stored = json::parse(item->value, nullptr, false);
  if (stored.is_discarded()) return Internal("update step", traj, "the stored step is not JSON");
  stored["doc"] = doc;
  const std::string value = stored.dump();
  WARREN_RETURN_IF_ERROR(CheckSize(value, "the trajectory step", traj));
  // Unchanged since read: a concurrent update is not silently overwritten.
  Txn txn;
  txn.compare.push_back(Compare::ModIs(key, item->mod_revision));
  txn.success.push_back(TxnOp::Put(key, value));
  auto r = WARREN_TRY(kv_->Commit(txn));
  if (!r.succeeded) return Status(Code::kConflict, "update step", traj, "changed meanwhile");
  return Status::Ok();
}

std::vector<json> KvStateStore::ListSteps(const std::string& traj) {
  std::vector<json> out;
  for (auto& j : ListJson(keys::Trajectory(traj), "trajectory steps"))
    if (j.contains("doc")) out.push_back(std::move(j["doc"]));
  return out;
}

int64_t KvStateStore::MaxStep(const std::string& traj) {
  const std::string prefix = keys::Trajectory(traj);
  RangeRequest req;
  req.key = prefix;
  req.range_end = PrefixEnd(prefix);
  req.keys_only = true;
  auto listed = kv_->Range(req);
  if (!listed.ok() || listed->kvs.empty()) return -1;
  const std::string& last = listed->kvs.back().key;  // keys sort by their zero-padded step
  return std::stoll(last.substr(prefix.size()));
}

Result<json> KvStateStore::FindStepByExec(const std::string& exec_id) {
  auto index = WARREN_TRY(GetJson(keys::StepByExec(exec_id), "exec", exec_id));
  if (!index.contains("traj") || !index["traj"].is_string() || !index.contains("step") ||
      !index["step"].is_number_integer())
    return Internal("find step", exec_id, "the stored index is malformed");
  const std::string traj = index["traj"].get<std::string>();
  auto doc = GetStep(traj, index["step"].get<int64_t>());
  if (!doc.ok()) {
    if (doc.status().code() == Code::kNotFound) return NotFound("exec", exec_id);
    return doc.status();
  }
  return json{{"traj", traj}, {"doc", *doc}};
}

}  // namespace warren::cluster
