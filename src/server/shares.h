// A principal's share: its live sandboxes and the CPU and memory they asked for, against the
// limits its token sets. One rule for both stores: `warren serve` counts shares in process
// (server/quota.h), a cluster in etcd, checked in the same transaction that inserts the
// record (cluster/kv_state_store.h), so two API servers cannot both grant the last slot.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "base/status.h"

namespace warren::server {

struct Share {
  int64_t sandboxes = 0;
  double cpu = 0;
  int64_t memory_mb = 0;
};

// 0: no limit.
struct ShareLimits {
  int64_t sandboxes = 0;
  double cpu = 0;
  int64_t memory_mb = 0;
  bool any() const { return sandboxes > 0 || cpu > 0 || memory_mb > 0; }
};

// Whether a sandbox in state `state` (its API name) holds its owner's share: every live one
// and one being made or stopped; a failed or lost one gave it back.
inline bool HoldsShare(const std::string& state) { return state != "failed" && state != "lost"; }

// Ok when one more sandbox of (cpu, memory_mb) keeps `owner` within `limits`, given `used`;
// else a `quota` status naming the limit reached. (Inline: the cluster library, which has no
// other part of the server's, checks shares too.)
inline Status AdmitShare(const std::string& owner, const ShareLimits& limits, const Share& used,
                         double cpu, int64_t memory_mb) {
  auto fmt = [](double v) {
    char b[32];
    snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  auto refuse = [&](const std::string& what) {
    return Status(Code::kQuota, "create sandbox", owner, what);
  };
  if (limits.sandboxes > 0 && used.sandboxes + 1 > limits.sandboxes)
    return refuse("quota of " + std::to_string(limits.sandboxes) + " sandboxes reached");
  if (limits.cpu > 0 && used.cpu + cpu > limits.cpu + 1e-9)
    return refuse("CPU quota " + fmt(limits.cpu) + " reached (" + fmt(used.cpu) +
                  " in use, asked " + fmt(cpu) + ")");
  if (limits.memory_mb > 0 && used.memory_mb + memory_mb > limits.memory_mb)
    return refuse("memory quota " + std::to_string(limits.memory_mb) + " MB reached (" +
                  std::to_string(used.memory_mb) + " MB in use, asked " +
                  std::to_string(memory_mb) + ")");
  return Status::Ok();
}

}  // namespace warren::server
