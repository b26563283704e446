#include "agent/native_request.h"

#include <cstring>

#include "agent/run_limits.h"

namespace warren::agent {
namespace {

using nlohmann::json;

void AddString(std::string* out, std::string_view s) {
  out->append(s.substr(0, s.find('\0')));
  out->push_back('\0');
}

}  // namespace

std::string EncodeNativeRequest(const json& req, std::string_view files_data) {
  NativeRequestHead h;
  std::string strings;
  const json cwd = req.value("cwd", json("/tmp"));
  AddString(&strings, cwd.is_string() ? cwd.get_ref<const std::string&>() : "/tmp");
  if (const json& argv = req.value("argv", json::array()); argv.is_array())
    for (const json& a : argv)
      if (a.is_string()) AddString(&strings, a.get_ref<const std::string&>()), ++h.argc;
  if (const json& env = req.value("env", json::object()); env.is_object())
    for (const auto& [k, v] : env.items())
      if (v.is_string()) AddString(&strings, k + "=" + v.get<std::string>()), ++h.envc;
  std::string table, bytes;
  if (const json& files = req.value("files", json::array()); files.is_array()) {
    for (const json& f : files) {
      const uint64_t len = std::min<uint64_t>(JsonCount(f, "len"), files_data.size());
      if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) {
        files_data.remove_prefix(len);  // its bytes go with it, as the files after it stay theirs
        continue;
      }
      NativeRequestFile rec;
      rec.len = len;
      rec.mode = f.contains("mode") ? static_cast<uint32_t>(JsonCount(f, "mode")) & 0777 : 0644;
      AddString(&strings, f["name"].get_ref<const std::string&>());
      table.append(reinterpret_cast<const char*>(&rec), sizeof rec);
      bytes.append(files_data.substr(0, rec.len));
      files_data.remove_prefix(rec.len);
      ++h.nfiles;
    }
  }
  if (const json& collect = req.value("collect", json::array()); collect.is_array())
    for (const json& c : collect)
      if (c.is_string()) AddString(&strings, c.get_ref<const std::string&>()), ++h.ncollect;
  h.limits = RunLimitsFromJson(req.value("limits", json::object()));
  h.strings_len = static_cast<uint32_t>(strings.size());
  std::string out(reinterpret_cast<const char*>(&h), sizeof h);
  out += strings;
  out += table;
  out += bytes;
  return out;
}

const char* SplitNativeRequest(const NativeRequestHead& h, char* strings, char** ptrs, size_t nptrs,
                               NativeRequestView* view) {
  if (h.magic != kNativeRequestMagic) return "not a native request";
  if (h.strings_len > kNativeRequestMaxStrings) return "request strings too long";
  if (h.argc > kNativeRequestMaxItems || h.envc > kNativeRequestMaxItems ||
      h.nfiles > kNativeRequestMaxItems || h.ncollect > kNativeRequestMaxItems)
    return "too many strings in the request";
  if (nptrs < NativeRequestPointers(h)) return "too many strings in the request";
  if (h.argc == 0) return "empty argv";
  // ptrs: [free] argv... NULL envp... NULL file names... collect...
  view->argv = ptrs + 1;
  view->envp = view->argv + h.argc + 1;
  view->file_names = view->envp + h.envc + 1;
  view->collect = view->file_names + h.nfiles;
  const size_t want = size_t{1} + h.argc + h.envc + h.nfiles + h.ncollect;
  size_t got = 0, at = 0;
  while (got < want && at < h.strings_len) {
    char* s = strings + at;
    const void* nul = memchr(s, '\0', h.strings_len - at);
    if (!nul) break;
    at = static_cast<size_t>(static_cast<const char*>(nul) - strings) + 1;
    size_t i = got++;
    if (i == 0) {
      view->cwd = s;
      continue;
    }
    --i;
    if (i < h.argc) {
      view->argv[i] = s;
      continue;
    }
    i -= h.argc;
    if (i < h.envc) {
      view->envp[i] = s;
      continue;
    }
    i -= h.envc;
    if (i < h.nfiles)
      view->file_names[i] = s;
    else
      view->collect[i - h.nfiles] = s;
  }
  if (got != want || at != h.strings_len) return "garbled request strings";
  ptrs[0] = nullptr;
  view->argv[h.argc] = nullptr;
  view->envp[h.envc] = nullptr;
  return nullptr;
}

}  // namespace warren::agent
