#include "agent/python_request.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "agent/py_marshal.h"
#include "agent/run_limits.h"
#include "runtime/fncall/zygote_request.h"

namespace warren::agent {
namespace {

using nlohmann::json;

void PutU32(uint32_t v, std::string* out) { out->append(reinterpret_cast<const char*>(&v), 4); }

template <typename T>
void PutStruct(const T& v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

std::string EncodePythonRequest(const json& req, std::string_view files_data) {
  wz_request_head head{};
  head.version = WZ_REQUEST_VERSION;
  head.limits = RunLimitsFromJson(req.value("limits", json::object()));
  const std::string cwd =
      req.contains("cwd") && req["cwd"].is_string() ? req["cwd"].get<std::string>() : "";
  head.cwd_len = static_cast<uint32_t>(cwd.size());

  std::string table;
  uint64_t data_len = 0;
  if (req.contains("files") && req["files"].is_array()) {
    for (const json& f : req["files"]) {
      if (!f.is_object()) continue;
      const std::string name = f.value("name", "");
      wz_request_file entry{};
      entry.name_len = static_cast<uint32_t>(name.size());
      entry.mode = static_cast<uint32_t>(JsonCount(f, "mode") & 07777);
      if (!f.contains("mode")) entry.mode = 0644;
      entry.len = std::min<uint64_t>(JsonCount(f, "len"), files_data.size() - data_len);
      data_len += entry.len;
      PutStruct(entry, &table);
      table += name;
      ++head.nfiles;
    }
  }
  std::string out;
  PutU32(static_cast<uint32_t>(sizeof head + cwd.size() + table.size()), &out);
  PutStruct(head, &out);
  out += cwd;
  out += table;
  out.append(files_data.substr(0, data_len));

  json dict = json::object();
  for (const char* k : {"mode", "code", "args", "filename", "env"})
    if (req.contains(k)) dict[k] = req[k];
  std::string blob;
  PutMarshalDict(dict, "", "", &blob);
  PutU32(static_cast<uint32_t>(blob.size()), &out);
  out += blob;
  return out;
}

}  // namespace warren::agent
