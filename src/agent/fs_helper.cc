#include "agent/fs_helper.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/cleanup.h"
#include "base/unique_fd.h"
#include "base/utf8.h"
#include "isolation/fs_prepare.h"

namespace warren::agent {
namespace {

using nlohmann::json;

Status CheckKeys(const json& j, std::initializer_list<const char*> keys, const char* what) {
  if (!j.is_object()) return Invalid(std::string(what) + ": not an object");
  for (const char* k : keys)
    if (!j.contains(k)) return Invalid(std::string(what) + ": missing `" + k + "`");
  if (j.size() != keys.size()) return Invalid(std::string(what) + ": unknown key");
  return Status::Ok();
}

// Paths travel in base64 everywhere on these wires: a name in the sandbox need not be UTF-8,
// and JSON would refuse it (or, replaced, it would name another file).
json B64(const std::vector<std::string>& v) {
  json out = json::array();
  for (const auto& s : v) out.push_back(Base64Encode(s));
  return out;
}

Result<std::vector<std::string>> Strings(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_array()) return Invalid(std::string("`") + key + "` is not a list");
  std::vector<std::string> out;
  for (const auto& s : v) {
    std::string raw;
    if (!s.is_string() || !Base64Decode(s.get<std::string>(), &raw))
      return Invalid(std::string("`") + key + "` holds something that is not base64");
    out.push_back(std::move(raw));
  }
  return out;
}

Result<isolation::FsPolicy> PolicyRequest(const json& j, const char* what) {
  WARREN_RETURN_IF_ERROR(CheckKeys(j, {"op", "read_only", "writable"}, what));
  return isolation::FsPolicy{WARREN_TRY(Strings(j, "read_only")),
                             WARREN_TRY(Strings(j, "writable"))};
}

// Joins the agent's mount and user namespaces at once through its pidfd (fd `pidfd`), which
// names that process and no other, whatever became of its pid.
Status Enter(int pidfd) {
  if (setns(pidfd, CLONE_NEWNS | CLONE_NEWUSER) != 0)
    return ErrnoStatus("setns mnt+user of", "the agent");
  close(pidfd);
  if (setgroups(0, nullptr) != 0 && errno != EPERM) return ErrnoStatus("setgroups", "fs helper");
  if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0)
    return ErrnoStatus("become root of", "sandbox");
  if (chdir("/") != 0) return ErrnoStatus("chdir", "/");
  umask(0);
  return Status::Ok();
}

std::string Handle(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("op") || !j["op"].is_string())
    return EncodeFsError(Invalid("bad request"));
  const std::string op = j["op"];
  if (op == "prepare" || op == "check") {
    auto policy = PolicyRequest(j, op.c_str());
    if (!policy.ok()) return EncodeFsError(policy.status());
    if (op == "check") {
      Status st = isolation::CheckFsPolicy(*policy);
      return st.ok() ? EncodeFsDone() : EncodeFsError(st);
    }
    auto r = isolation::PrepareFsPolicy(*policy);
    return r.ok() ? EncodeFsPrepareReply(*r) : EncodeFsError(r.status());
  }
  if (op == "sever") {
    if (Status st = CheckKeys(j, {"op", "paths"}, "sever"); !st.ok()) return EncodeFsError(st);
    auto paths = Strings(j, "paths");
    if (!paths.ok()) return EncodeFsError(Invalid("bad sever request"));
    for (const auto& p : *paths)
      if (Status st = isolation::SeverFile(p); !st.ok()) return EncodeFsError(st);
    return EncodeFsDone();
  }
  return EncodeFsError(Invalid("unknown op `" + op + "`"));
}

}  // namespace

std::string EncodeFsPrepare(const FsPrepareRequest& r) {
  return json{{"op", "prepare"}, {"read_only", B64(r.read_only)}, {"writable", B64(r.writable)}}
             .dump() +
         "\n";
}
std::string EncodeFsCheck(const FsPrepareRequest& r) {
  return json{{"op", "check"}, {"read_only", B64(r.read_only)}, {"writable", B64(r.writable)}}
             .dump() +
         "\n";
}
std::string EncodeFsSever(const FsSeverRequest& r) {
  return json{{"op", "sever"}, {"paths", B64(r.paths)}}.dump() + "\n";
}
std::string EncodeFsPrepareReply(const FsPrepareReply& r) {
  return json{{"read_only", B64(r.read_only)},
              {"writable", B64(r.writable)},
              {"fixed_dirs", B64(r.fixed_dirs)}}
             .dump() +
         "\n";
}
std::string EncodeFsError(const Status& error) {
  return json{{"error", error.code() == Code::kInvalid ? error.message() : error.ToString()},
              {"invalid", error.code() == Code::kInvalid}}
             .dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n";
}
std::string EncodeFsDone() { return "{}\n"; }

namespace {
Status ErrorOf(const json& j) {
  if (j.value("invalid", false)) return Invalid(j["error"].get<std::string>());
  return Internal("apply filesystem policy", "fs helper", j["error"].get<std::string>());
}
}  // namespace

Result<FsPrepareReply> DecodeFsPrepareReply(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) return ErrorOf(j);
  WARREN_RETURN_IF_ERROR(CheckKeys(j, {"read_only", "writable", "fixed_dirs"}, "fs helper reply"));
  FsPrepareReply r;
  r.read_only = WARREN_TRY(Strings(j, "read_only"));
  r.writable = WARREN_TRY(Strings(j, "writable"));
  r.fixed_dirs = WARREN_TRY(Strings(j, "fixed_dirs"));
  return r;
}

Status DecodeFsDone(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) return ErrorOf(j);
  if (!j.is_object() || !j.empty()) return Invalid("fs helper: unexpected reply");
  return Status::Ok();
}

json FsPolicyFields(const isolation::FsPolicy& p) {
  return {{"read_only", B64(p.read_only)}, {"writable", B64(p.writable)}};
}

Result<isolation::FsPolicy> FsPolicyFromFields(const json& h) {
  if (!h.contains("read_only") || !h.contains("writable"))
    return Invalid("fs_policy: missing paths");
  isolation::FsPolicy p;
  p.read_only = WARREN_TRY(Strings(h, "read_only"));
  p.writable = WARREN_TRY(Strings(h, "writable"));
  return isolation::NormalizeFsPolicy(std::move(p));
}

std::string EncodeChangeReport(const isolation::ChangeReport& r) {
  json changes = json::array();
  for (const auto& c : r.changes)
    changes.push_back({{"path_b64", Base64Encode(c.path)},
                       {"kind", static_cast<int>(c.kind)},
                       {"type", static_cast<int>(c.type)},
                       {"layer", c.layer},
                       {"size", c.size},
                       {"mode", c.mode}});
  return json{{"changes", std::move(changes)}, {"truncated", r.truncated}}.dump();
}

Result<isolation::ChangeReport> DecodeChangeReport(const std::string& data) {
  json j = json::parse(data, nullptr, false);
  WARREN_RETURN_IF_ERROR(CheckKeys(j, {"changes", "truncated"}, "change report"));
  if (!j["changes"].is_array() || !j["truncated"].is_boolean())
    return Invalid("change report: bad types");
  isolation::ChangeReport r;
  r.truncated = j["truncated"].get<bool>();
  for (const auto& c : j["changes"]) {
    WARREN_RETURN_IF_ERROR(
        CheckKeys(c, {"path_b64", "kind", "type", "layer", "size", "mode"}, "change"));
    isolation::FsChange fc;
    if (!c["path_b64"].is_string() || !Base64Decode(c["path_b64"].get<std::string>(), &fc.path))
      return Invalid("change report: bad path");
    const int kind = c["kind"].is_number_integer() ? c["kind"].get<int>() : -1;
    const int type = c["type"].is_number_integer() ? c["type"].get<int>() : -1;
    if (kind < 0 || kind > 2 || type < 0 || type > 3 || !c["layer"].is_number_integer() ||
        !c["size"].is_number_unsigned() || !c["mode"].is_number_unsigned())
      return Invalid("change report: bad field");
    fc.kind = static_cast<isolation::ChangeKind>(kind);
    fc.type = static_cast<isolation::EntryType>(type);
    fc.layer = c["layer"].get<int>();
    fc.size = c["size"].get<uint64_t>();
    fc.mode = c["mode"].get<uint32_t>();
    r.changes.push_back(std::move(fc));
  }
  return r;
}

int FsHelperMain(int argc, char** argv) {
  if (argc < 3) return 2;
  Status st = Enter(atoi(argv[2]));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::string reply;
    try {
      reply = st.ok() ? Handle(line) : EncodeFsError(st);
    } catch (const std::exception& e) {
      reply = EncodeFsError(Internal("fs helper", "request", e.what()));
    }
    std::cout << reply << std::flush;
  }
  return 0;
}

}  // namespace warren::agent
