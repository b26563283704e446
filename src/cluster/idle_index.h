// Idle timeouts on a cluster. A sandbox's use is seen by whichever API server serves the
// request, and the one that made it may be gone, so no replica can end idle sandboxes from
// what it saw alone. Instead each sandbox with an idle_timeout_s has a deadline in etcd:
//
//   /warren/idle-at/ID            its current deadline (zero-padded Unix ms)
//   /warren/idle/DEADLINE_MS/ID   an index entry, value the timeout in ms
//
// The insert writes the first (creation counts as use); a replica that serves a use moves the
// deadline later, at most once per slack per sandbox (IdleRefresher), with a transaction that
// only ever moves it later; the removal deletes idle-at. Old index entries are left behind and
// dropped when they come due: the sweeper (cluster/expiry_sweeper.h) reads idle-at for each
// due entry, and only an entry that matches it is the sandbox's deadline.
//
// Why the slack: a use at time U moves the deadline unless this replica wrote one less than a
// slack S ago, so what is stored is never older than U - S. The deadline is the stored use
// plus the timeout plus S: never before U + timeout, at most S (plus a sweep) after it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/kv_store.h"

namespace warren::cluster {

// A quarter of the timeout, within [1 s, 60 s].
int64_t IdleSlackMs(int64_t timeout_ms);
// The deadline a use at `used_ms` gives a sandbox of idle timeout `timeout_ms`.
int64_t IdleDeadlineMs(int64_t used_ms, int64_t timeout_ms);
// A sandbox record's idle timeout (ms), or 0 without one.
int64_t IdleTimeoutMsOf(const nlohmann::json& sandbox);

// The ops an insert adds for the first deadline.
std::vector<TxnOp> IdleInsertOps(const std::string& id, int64_t deadline_ms, int64_t timeout_ms);
// Moves `id`'s deadline to `deadline_ms` if the sandbox has one and it is earlier.
Txn IdleMoveTxn(const std::string& id, int64_t deadline_ms, int64_t timeout_ms);

}  // namespace warren::cluster
