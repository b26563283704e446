// warren cp SRC DST, where either side may be ID:/path (a file inside a sandbox).
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <iterator>

#include "cli/common.h"

namespace warren::cli {
namespace {

// "sb-…:/abs/path" -> (id, path). Local paths never look like that (no '/' before ':').
bool SplitRemote(const std::string& s, std::string* id, std::string* path) {
  size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || s.substr(0, colon).find('/') != std::string::npos)
    return false;
  *id = s.substr(0, colon);
  *path = s.substr(colon + 1);
  return true;
}

// As cp(1): a destination that is a directory (a local one that exists, or any ending in
// '/') gets the source's file name.
std::string IntoDirectory(const std::string& dst, const std::string& src_path, bool local) {
  struct stat sb;
  const bool dir = (!dst.empty() && dst.back() == '/') ||
                   (local && stat(dst.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode));
  if (!dir) return dst;
  std::string base = src_path.substr(src_path.find_last_of('/') + 1);
  return dst + (dst.back() == '/' ? "" : "/") + base;
}

}  // namespace

void AddCp(CLI::App& app) {
  auto* cmd = app.add_subcommand("cp", "copy a file into or out of a sandbox (ID:/path)");
  auto src = std::make_shared<std::string>(), dst = std::make_shared<std::string>();
  cmd->add_option("src", *src, "source: local path, - for stdin, or ID:/path")->required();
  cmd->add_option("dst", *dst, "destination: local path, - for stdout, or ID:/path")->required();
  cmd->callback([src, dst] {
    std::string sid, spath, did, dpath;
    bool from = SplitRemote(*src, &sid, &spath), to = SplitRemote(*dst, &did, &dpath);
    if (from == to) return void(ExitCode() = Fail("cp", "exactly one side must be ID:/path"));
    if (from) {
      auto r = Client().Request("GET", "/v1/sandboxes/" + client::UrlEncode(sid) +
                                           "/files?path=" + client::UrlEncode(spath));
      Status st = r.ok() ? client::ToStatus(*r, "copy from " + *src) : r.status();
      if (!st.ok()) return void(ExitCode() = Fail(st));
      if (*dst == "-") return void(fwrite(r->body.data(), 1, r->body.size(), stdout));
      const std::string target = IntoDirectory(*dst, spath, true);
      std::ofstream out(target, std::ios::binary | std::ios::trunc);
      out.write(r->body.data(), static_cast<std::streamsize>(r->body.size()));
      if (!out) return void(ExitCode() = Fail("write " + target, strerror(errno)));
      return;
    }
    std::string data;
    unsigned mode = 0644;
    if (*src == "-") {
      data.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::ifstream in(*src, std::ios::binary);
      if (!in) return void(ExitCode() = Fail("open " + *src, strerror(errno)));
      data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      struct stat sb;
      if (stat(src->c_str(), &sb) == 0) mode = sb.st_mode & 07777;
    }
    if (*src != "-") dpath = IntoDirectory(dpath, *src, false);
    char m[16];
    snprintf(m, sizeof m, "%04o", mode);
    auto r = Client().Request("PUT",
                              "/v1/sandboxes/" + client::UrlEncode(did) +
                                  "/files?path=" + client::UrlEncode(dpath) + "&mode=" + m,
                              data, "application/octet-stream");
    Status st = r.ok() ? client::ToStatus(*r, "copy to " + *dst) : r.status();
    if (!st.ok()) ExitCode() = Fail(st);
  });
}

}  // namespace warren::cli
