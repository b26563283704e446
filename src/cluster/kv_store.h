// KvStore: the cluster's shared state, as etcd's v3 key-value model (a flat, ordered key space
// with one global revision, multi-key transactions guarded by comparisons, leases that delete
// their keys when they expire, and watches from a revision on). EtcdClient speaks it to a real
// etcd; unit tests use tests/unit/mem_kv.h. Nothing above this header knows which.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::cluster {

struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

// [key, range_end): range_end "" is the one key, PrefixEnd(p) every key starting with p.
struct RangeRequest {
  std::string key, range_end;
  int64_t limit = 0;     // 0: no limit
  int64_t revision = 0;  // 0: the newest
  bool keys_only = false;
  bool count_only = false;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  int64_t count = 0;  // keys in the range, even past `limit`
  bool more = false;  // `limit` cut the answer short
  int64_t revision = 0;
};

// The end of the range of keys that start with `prefix` (etcd's "prefix + 1").
std::string PrefixEnd(const std::string& prefix);

// A transaction's condition on one key. A missing key has version, create and mod revision 0.
struct Compare {
  enum class Target { kVersion, kCreate, kMod, kValue, kLease };
  enum class Op { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kVersion;
  Op op = Op::kEqual;
  int64_t number = 0;  // version, revision or lease
  std::string value;   // for kValue
  // With a range_end, every key of [key, range_end) must hold (an empty range compares as a
  // missing key): "no key under a prefix changed since revision R" is one comparison.
  std::string range_end;

  static Compare Missing(std::string key) { return {std::move(key), Target::kVersion}; }
  static Compare Exists(std::string key) {
    return {std::move(key), Target::kVersion, Op::kGreater};
  }
  // Unchanged since it was read at `mod_revision` (0: still missing).
  static Compare ModIs(std::string key, int64_t mod_revision) {
    return {std::move(key), Target::kMod, Op::kEqual, mod_revision};
  }
  // No key under `prefix` was written after `revision` (deletions do not count).
  static Compare NoneWrittenAfter(const std::string& prefix, int64_t revision) {
    Compare c{prefix, Target::kMod, Op::kLess, revision + 1};
    c.range_end = PrefixEnd(prefix);
    return c;
  }
  static Compare ValueIs(std::string key, std::string value) {
    return {std::move(key), Target::kValue, Op::kEqual, 0, std::move(value)};
  }
};

struct TxnOp {
  enum class Kind { kPut, kDelete, kGet };
  Kind kind = Kind::kGet;
  std::string key, value, range_end;
  int64_t lease = 0;

  static TxnOp Put(std::string key, std::string value, int64_t lease = 0) {
    return {Kind::kPut, std::move(key), std::move(value), "", lease};
  }
  static TxnOp Delete(std::string key, std::string range_end = "") {
    return {Kind::kDelete, std::move(key), "", std::move(range_end)};
  }
  static TxnOp Get(std::string key, std::string range_end = "") {
    return {Kind::kGet, std::move(key), "", std::move(range_end)};
  }
};

// If every comparison holds, `success` runs, else `failure`; all at one revision.
struct Txn {
  std::vector<Compare> compare;
  std::vector<TxnOp> success, failure;
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  // One per kGet of the branch that ran, in order.
  std::vector<RangeResult> gets;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // of a delete: the key and its mod_revision only
};

// Ends the watch when destroyed; no callback runs after the destructor returns.
class Watch {
 public:
  virtual ~Watch() = default;
};

struct WatchCallbacks {
  // Events in revision order, each batch from one revision or more; never concurrently.
  std::function<void(const std::vector<WatchEvent>&)> on_events;
  // The watch cannot go on: the revision it needed was compacted (kConflict; the caller lists
  // again and watches from the list's revision), or the store was closed. Called at most
  // once; no on_events after it.
  std::function<void(const Status&)> on_end;
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  virtual Result<RangeResult> Range(const RangeRequest& req) = 0;
  // Returns the revision of the write.
  virtual Result<int64_t> Put(const std::string& key, const std::string& value,
                              int64_t lease = 0) = 0;
  // Returns how many keys went.
  virtual Result<int64_t> Delete(const std::string& key, const std::string& range_end = "") = 0;
  virtual Result<TxnResult> Commit(const Txn& txn) = 0;

  // A lease of `ttl_s` seconds; keys put with it go when it expires or is revoked.
  virtual Result<int64_t> GrantLease(int64_t ttl_s) = 0;
  // Renews the lease; returns its TTL. kNotFound if it has expired.
  virtual Result<int64_t> KeepAlive(int64_t lease) = 0;
  virtual Status RevokeLease(int64_t lease) = 0;

  // Changes to [key, range_end) from `start_revision` on (0: from now). Callbacks run on a
  // thread of the store's. A broken connection is resumed inside the store, from the revision
  // after the last event delivered: the caller sees every change once, in order.
  virtual Result<std::unique_ptr<Watch>> WatchRange(const std::string& key,
                                                    const std::string& range_end,
                                                    int64_t start_revision,
                                                    WatchCallbacks callbacks) = 0;

  // Convenience: the one key, or kNotFound.
  Result<KeyValue> Get(const std::string& key);
  // Every key under `prefix`, at one revision.
  Result<RangeResult> List(const std::string& prefix);
};

}  // namespace warren::cluster
