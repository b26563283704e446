#include "cluster/node_reconcile.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <set>

#include "cluster/keys.h"
#include "cluster/kv_state_store.h"
#include "cluster/reservations.h"
#include "server/sandbox_table.h"

namespace warren::cluster {

NodeReconcileReport ReconcileNode(KvStore* kv, node::NodeApi* node, const std::string& name,
                                  const std::vector<std::string>& running) {
  NodeReconcileReport report;
  // Listed here, not through the table: an unreachable etcd must stop this pass, not look
  // like a cluster without records (which would delete every sandbox of the node).
  auto listed = kv->List(keys::kSandboxes);
  if (!listed.ok()) {
    spdlog::warn("node {}: reconcile with the cluster: {}", name, listed.status().ToString());
    return report;
  }
  KvStateStore store(kv);
  server::SandboxTable table(&store);
  Reservations reservations(kv);
  const std::set<std::string> here(running.begin(), running.end());
  std::set<std::string> keep;
  using S = server::SandboxState;
  for (const auto& item : listed->kvs) {
    const std::string id = keys::NameOf(item.key, keys::kSandboxes);
    auto doc = nlohmann::json::parse(item.value, nullptr, false);
    auto parsed = doc.is_discarded() ? Result<server::SandboxRecord>(Internal("parse", id, "JSON"))
                                     : server::ParseSandboxRecord(doc);
    if (!parsed.ok()) {
      keep.insert(id);  // a record this version cannot read: never a reason to delete
      continue;
    }
    const server::SandboxRecord& rec = *parsed;
    if (rec.node != name || !here.count(rec.id)) continue;
    if (rec.state == S::kCreating || rec.state == S::kRunning || rec.state == S::kPaused ||
        rec.state == S::kStopping) {
      keep.insert(rec.id);
      continue;
    }
    if (rec.state != S::kLost) continue;
    auto back = table.Transition(rec.id, S::kRunning, {S::kLost});
    if (!back.ok()) continue;  // someone else changed it: the next pass sees what it is
    keep.insert(rec.id);
    ++report.readmitted;
    // The node's room goes back to it without a limit: the sandbox is here whether it fits
    // the ratio or not, and placement must count it.
    const Resources each{static_cast<int64_t>(std::llround(rec.spec.cpu * 1000)),
                         static_cast<int64_t>(rec.spec.memory_mb),
                         static_cast<int64_t>(rec.spec.disk_mb)};
    const int64_t huge = std::numeric_limits<int64_t>::max() / 4;
    auto reserved = reservations.Reserve(name, each, 1, {huge, huge, huge}, false);
    if (!reserved.ok())
      spdlog::warn("node {}: sandbox {} is back but its room was not reserved again: {}", name,
                   rec.id, reserved.status().ToString());
  }
  for (const std::string& id : running) {
    if (keep.count(id)) continue;
    if (Status st = node->DeleteSandbox(id); st.ok()) {
      ++report.reaped;
      spdlog::info("node {}: deleted sandbox {}: its record is gone or not this node's", name, id);
    } else {
      spdlog::warn("node {}: delete sandbox {} without a record: {}", name, id, st.ToString());
    }
  }
  return report;
}

}  // namespace warren::cluster
