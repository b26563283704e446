#include "cluster/etcd_json.h"

#include <charconv>

#include "base/utf8.h"

namespace warren::cluster::etcd_json {

using nlohmann::json;

namespace {

std::string B64(const std::string& s) { return Base64Encode(s); }

Status Malformed(const std::string& what) {
  return Status(Code::kUnavailable, "etcd", what, "an answer etcd's gateway should not give");
}

// An int64 as the gateway writes it: a decimal string (a number accepted too). Absent: 0.
Result<int64_t> Int(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return int64_t{0};
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return Malformed(field);
  const std::string& s = it->get_ref<const std::string&>();
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return Malformed(field);
  return v;
}

Result<std::string> Bytes(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::string();
  std::string out;
  if (!it->is_string() || !Base64Decode(it->get_ref<const std::string&>(), &out))
    return Malformed(field);
  return out;
}

Result<KeyValue> ParseKv(const json& j) {
  if (!j.is_object()) return Malformed("kv");
  KeyValue kv;
  kv.key = WARREN_TRY(Bytes(j, "key"));
  kv.value = WARREN_TRY(Bytes(j, "value"));
  kv.create_revision = WARREN_TRY(Int(j, "create_revision"));
  kv.mod_revision = WARREN_TRY(Int(j, "mod_revision"));
  kv.version = WARREN_TRY(Int(j, "version"));
  kv.lease = WARREN_TRY(Int(j, "lease"));
  return kv;
}

Result<int64_t> HeaderRevision(const json& j) {
  auto it = j.find("header");
  if (it == j.end() || !it->is_object()) return Malformed("header");
  return Int(*it, "revision");
}

json RequestOp(const TxnOp& op) {
  switch (op.kind) {
    case TxnOp::Kind::kPut:
      return {{"request_put", PutBody(op.key, op.value, op.lease)}};
    case TxnOp::Kind::kDelete:
      return {{"request_delete_range", DeleteBody(op.key, op.range_end)}};
    case TxnOp::Kind::kGet:
      return {{"request_range", RangeBody({.key = op.key, .range_end = op.range_end})}};
  }
  return nullptr;
}

const char* TargetName(Compare::Target t) {
  switch (t) {
    case Compare::Target::kVersion:
      return "VERSION";
    case Compare::Target::kCreate:
      return "CREATE";
    case Compare::Target::kMod:
      return "MOD";
    case Compare::Target::kValue:
      return "VALUE";
    case Compare::Target::kLease:
      return "LEASE";
  }
  return "VERSION";
}

const char* OpName(Compare::Op op) {
  switch (op) {
    case Compare::Op::kEqual:
      return "EQUAL";
    case Compare::Op::kNotEqual:
      return "NOT_EQUAL";
    case Compare::Op::kGreater:
      return "GREATER";
    case Compare::Op::kLess:
      return "LESS";
  }
  return "EQUAL";
}

json CompareJson(const Compare& c) {
  json j = {{"key", B64(c.key)}, {"target", TargetName(c.target)}, {"result", OpName(c.op)}};
  if (!c.range_end.empty()) j["range_end"] = B64(c.range_end);
  const std::string n = std::to_string(c.number);
  switch (c.target) {
    case Compare::Target::kVersion:
      j["version"] = n;
      break;
    case Compare::Target::kCreate:
      j["create_revision"] = n;
      break;
    case Compare::Target::kMod:
      j["mod_revision"] = n;
      break;
    case Compare::Target::kLease:
      j["lease"] = n;
      break;
    case Compare::Target::kValue:
      j["value"] = B64(c.value);
      break;
  }
  return j;
}

}  // namespace

json RangeBody(const RangeRequest& req) {
  json j = {{"key", B64(req.key)}};
  if (!req.range_end.empty()) j["range_end"] = B64(req.range_end);
  if (req.limit > 0) j["limit"] = std::to_string(req.limit);
  if (req.revision > 0) j["revision"] = std::to_string(req.revision);
  if (req.keys_only) j["keys_only"] = true;
  if (req.count_only) j["count_only"] = true;
  return j;
}

json PutBody(const std::string& key, const std::string& value, int64_t lease) {
  json j = {{"key", B64(key)}, {"value", B64(value)}};
  if (lease != 0) j["lease"] = std::to_string(lease);
  return j;
}

json DeleteBody(const std::string& key, const std::string& range_end) {
  json j = {{"key", B64(key)}};
  if (!range_end.empty()) j["range_end"] = B64(range_end);
  return j;
}

json TxnBody(const Txn& txn) {
  json j = json::object();
  json& cmp = j["compare"] = json::array();
  for (const Compare& c : txn.compare) cmp.push_back(CompareJson(c));
  json& ok = j["success"] = json::array();
  for (const TxnOp& op : txn.success) ok.push_back(RequestOp(op));
  json& fail = j["failure"] = json::array();
  for (const TxnOp& op : txn.failure) fail.push_back(RequestOp(op));
  return j;
}

json WatchCreateBody(const std::string& key, const std::string& range_end, int64_t start_revision) {
  json req = {{"key", B64(key)}};
  if (!range_end.empty()) req["range_end"] = B64(range_end);
  if (start_revision > 0) req["start_revision"] = std::to_string(start_revision);
  // Progress notifications carry the revision while nothing changes, so a resumed watch
  // starts from a recent revision rather than one that may have been compacted since.
  req["progress_notify"] = true;
  return {{"create_request", req}};
}

Result<RangeResult> ParseRange(const json& j) {
  if (!j.is_object()) return Malformed("range");
  RangeResult r;
  if (j.contains("header")) r.revision = WARREN_TRY(HeaderRevision(j));
  r.count = WARREN_TRY(Int(j, "count"));
  auto more = j.find("more");
  r.more = more != j.end() && more->is_boolean() && more->get<bool>();
  auto kvs = j.find("kvs");
  if (kvs != j.end() && !kvs->is_null()) {
    if (!kvs->is_array()) return Malformed("kvs");
    r.kvs.reserve(kvs->size());
    for (const json& kv : *kvs) r.kvs.push_back(WARREN_TRY(ParseKv(kv)));
  }
  return r;
}

Result<int64_t> ParseRevision(const json& j) { return HeaderRevision(j); }

Result<int64_t> ParseDeleted(const json& j) { return Int(j, "deleted"); }

Result<TxnResult> ParseTxn(const json& j) {
  if (!j.is_object()) return Malformed("txn");
  TxnResult r;
  r.revision = WARREN_TRY(HeaderRevision(j));
  auto ok = j.find("succeeded");
  r.succeeded = ok != j.end() && ok->is_boolean() && ok->get<bool>();
  auto responses = j.find("responses");
  if (responses == j.end() || responses->is_null()) return r;
  if (!responses->is_array()) return Malformed("responses");
  for (const json& resp : *responses) {
    auto range = resp.find("response_range");
    if (range == resp.end()) continue;
    RangeResult rr = WARREN_TRY(ParseRange(*range));
    rr.revision = r.revision;
    r.gets.push_back(std::move(rr));
  }
  return r;
}

Result<int64_t> ParseLeaseId(const json& j) {
  if (!j.is_object()) return Malformed("lease");
  int64_t id = WARREN_TRY(Int(j, "ID"));
  if (id == 0) return Malformed("lease ID");
  return id;
}

Result<int64_t> ParseKeepAlive(const json& j) {
  auto it = j.find("result");
  if (it == j.end() || !it->is_object()) return Malformed("keepalive");
  // etcd answers a lease that is gone with TTL 0, which the gateway leaves out.
  int64_t ttl = WARREN_TRY(Int(*it, "TTL"));
  if (ttl <= 0) return NotFound("lease", std::to_string(WARREN_TRY(Int(*it, "ID"))));
  return ttl;
}

Result<WatchMessage> ParseWatchMessage(const json& j) {
  auto it = j.find("result");
  if (it == j.end() || !it->is_object()) return Malformed("watch");
  const json& r = *it;
  WatchMessage m;
  if (r.contains("header")) m.revision = WARREN_TRY(HeaderRevision(r));
  m.created = r.value("created", false);
  m.canceled = r.value("canceled", false);
  m.compact_revision = WARREN_TRY(Int(r, "compact_revision"));
  if (auto reason = r.find("cancel_reason"); reason != r.end() && reason->is_string())
    m.cancel_reason = reason->get<std::string>();
  auto events = r.find("events");
  if (events != r.end() && !events->is_null()) {
    if (!events->is_array()) return Malformed("events");
    for (const json& e : *events) {
      WatchEvent ev;
      ev.type = e.value("type", std::string("PUT")) == "DELETE" ? WatchEvent::Type::kDelete
                                                                : WatchEvent::Type::kPut;
      auto kv = e.find("kv");
      if (kv == e.end()) return Malformed("event kv");
      ev.kv = WARREN_TRY(ParseKv(*kv));
      m.events.push_back(std::move(ev));
    }
  }
  return m;
}

Status ErrorStatus(const json& j, int http_status, const std::string& op,
                   const std::string& object) {
  std::string message = "HTTP " + std::to_string(http_status);
  int grpc = -1;
  if (j.is_object()) {
    if (auto m = j.find("message"); m != j.end() && m->is_string()) message = m->get<std::string>();
    if (auto c = j.find("code"); c != j.end() && c->is_number_integer()) grpc = c->get<int>();
  }
  Code code = Code::kUnavailable;
  switch (grpc) {
    case 3:  // InvalidArgument
      code = Code::kInvalid;
      break;
    case 5:  // NotFound (a lease)
      code = Code::kNotFound;
      break;
    case 11:  // OutOfRange: a compacted revision
    case 9:   // FailedPrecondition
      code = Code::kConflict;
      break;
    case 8:  // ResourceExhausted: a request or the database too large
      code = Code::kQuota;
      break;
    default:  // Unavailable, DeadlineExceeded, Unknown (no leader): try again
      code = http_status >= 500 || grpc == 14 || grpc == 4 || grpc == 2 ? Code::kUnavailable
                                                                        : Code::kInternal;
  }
  return Status(code, "etcd " + op, object, message);
}

}  // namespace warren::cluster::etcd_json
