#include "server/e2b/fs_tools.h"

#include <sys/stat.h>

#include <sstream>

#include "base/utf8.h"

namespace warren::server::e2b {

namespace {

constexpr const char* kStatFormat = "%f|%s|%U|%G|%Y|%n";

// Exit codes the scripts use for what envd reports by code.
constexpr int kExitNotFound = 2;
constexpr int kExitExists = 17;
constexpr int kExitNotDir = 20;

// `sh -c SCRIPT sh ARGS...`: the helper `entry` prints a path's stat line, and for a
// symbolic link a second line "L|TARGET".
const std::string kEntryFn = std::string("entry() { stat -c '") + kStatFormat +
                             "' -- \"$1\" || exit 1; if [ -L \"$1\" ]; then printf 'L|%s\\n' "
                             "\"$(readlink -- \"$1\")\"; fi; }\n"
                             "exists() { [ -e \"$1\" ] || [ -L \"$1\" ]; }\n";

Result<std::vector<EntryInfo>> ParseEntries(const std::string& out) {
  std::vector<EntryInfo> entries;
  std::istringstream lines(out);
  std::string line, link;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line.rfind("T|", 0) == 0) {  // the link whose target the next line is
      link = SanitizeUtf8(line.substr(2));
      continue;
    }
    if (line.rfind("L|", 0) == 0) {
      for (auto it = entries.rbegin(); it != entries.rend(); ++it)
        if (link.empty() || it->path == link) {
          it->symlink_target = SanitizeUtf8(line.substr(2));
          break;
        }
      link.clear();
      continue;
    }
    EntryInfo e;
    if (!ParseStatLine(line, &e))
      return Status(Code::kInternal, "read file entry", "", "malformed stat output: " + line);
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace

std::string ResolvePath(const std::string& path) {
  std::string p = !path.empty() && path[0] == '/' ? path
                  : path == "~"                   ? "/root"
                  : path.rfind("~/", 0) == 0      ? "/root/" + path.substr(2)
                                                  : "/root/" + path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();  // find prints "dir//name" otherwise
  return p;
}

std::string PermissionString(uint32_t mode) {
  std::string s = S_ISDIR(mode) ? "d" : S_ISLNK(mode) ? "l" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (mode & (0400u >> i)) ? rwx[i] : '-';
  if (mode & S_ISUID) s[3] = (mode & S_IXUSR) ? 's' : 'S';
  if (mode & S_ISGID) s[6] = (mode & S_IXGRP) ? 's' : 'S';
  if (mode & S_ISVTX) s[9] = (mode & S_IXOTH) ? 't' : 'T';
  return s;
}

bool ParseStatLine(std::string_view line, EntryInfo* e) {
  std::string_view fields[5];
  for (auto& f : fields) {
    size_t bar = line.find('|');
    if (bar == std::string_view::npos) return false;
    f = line.substr(0, bar);
    line.remove_prefix(bar + 1);
  }
  if (line.empty()) return false;
  char* end = nullptr;
  const std::string hex(fields[0]);
  const unsigned long raw = strtoul(hex.c_str(), &end, 16);
  if (hex.empty() || *end) return false;
  const auto mode = static_cast<uint32_t>(raw);
  const std::string size(fields[1]), mtime(fields[4]);
  e->size = strtoll(size.c_str(), &end, 10);
  if (size.empty() || *end) return false;
  e->modified = strtod(mtime.c_str(), &end);
  if (mtime.empty() || *end) return false;
  e->type = S_ISDIR(mode)   ? FileType::kDirectory
            : S_ISLNK(mode) ? FileType::kSymlink
            : S_ISREG(mode) ? FileType::kFile
                            : FileType::kUnspecified;
  e->mode = mode & 07777;
  e->permissions = PermissionString(mode);
  e->owner = SanitizeUtf8(fields[2]);
  e->group = SanitizeUtf8(fields[3]);
  e->path = SanitizeUtf8(line);
  size_t slash = e->path.find_last_of('/');
  e->name = slash == std::string::npos || e->path == "/" ? e->path : e->path.substr(slash + 1);
  return true;
}

Result<ToolOutput> FsTools::Run(const char* op, const std::string& path, const std::string& script,
                                std::vector<std::string> args) {
  std::vector<std::string> argv = {"/bin/sh", "-c", kEntryFn + script, "sh"};
  for (auto& a : args) argv.push_back(std::move(a));
  ToolOutput r = WARREN_TRY(run_(std::move(argv)));
  if (r.exit_code == 0) return r;
  std::string err = SanitizeUtf8(r.err.substr(0, 2000));
  while (!err.empty() && err.back() == '\n') err.pop_back();
  switch (r.exit_code) {
    case kExitNotFound:
      return Status(Code::kNotFound, op, path, "no such file or directory");
    case kExitExists:
      return Status(Code::kConflict, op, path, "it exists already");
    case kExitNotDir:
      return Invalid("not a directory", path);
    case 126:
    case 127:
      return Status(Code::kConflict, op, path,
                    "the sandbox's image lacks the tools for it (sh, stat, find, mv, rm)");
    default:
      return Status(Code::kInvalid, op, path,
                    "failed (exit " + std::to_string(r.exit_code) + "): " + err);
  }
}

Result<EntryInfo> FsTools::Stat(const std::string& path) {
  ToolOutput r = WARREN_TRY(Run("stat", path, "exists \"$1\" || exit 2; entry \"$1\"", {path}));
  auto entries = WARREN_TRY(ParseEntries(r.out));
  if (entries.size() != 1) return Status(Code::kInternal, "stat", path, "unexpected stat output");
  return entries[0];
}

Result<std::vector<EntryInfo>> FsTools::List(const std::string& path, uint32_t depth) {
  if (depth == 0) depth = 1;
  if (depth > 64) return Invalid("`depth` must be 1 to 64");
  // One stat for all the entries, then the targets of the links among them.
  const std::string script =
      "exists \"$1\" || exit 2\n"
      "[ -d \"$1\" ] || exit 20\n"
      "find \"$1\" -mindepth 1 -maxdepth \"$2\" -exec stat -c '" +
      std::string(kStatFormat) +
      "' -- {} + || exit 1\n"
      "find \"$1\" -mindepth 1 -maxdepth \"$2\" -type l | while IFS= read -r f; do "
      "printf 'T|%s\\nL|%s\\n' \"$f\" \"$(readlink -- \"$f\")\"; done";
  ToolOutput r = WARREN_TRY(Run("list directory", path, script, {path, std::to_string(depth)}));
  return ParseEntries(r.out);
}

Result<EntryInfo> FsTools::MakeDir(const std::string& path) {
  ToolOutput r =
      WARREN_TRY(Run("make directory", path,
                     "exists \"$1\" && exit 17; mkdir -p -- \"$1\" && entry \"$1\"", {path}));
  auto entries = WARREN_TRY(ParseEntries(r.out));
  if (entries.empty()) return Status(Code::kInternal, "make directory", path, "no entry");
  return entries[0];
}

Result<EntryInfo> FsTools::Move(const std::string& from, const std::string& to) {
  ToolOutput r = WARREN_TRY(Run("move", from,
                                "exists \"$1\" || exit 2\n"
                                "mkdir -p -- \"$(dirname -- \"$2\")\" && mv -f -- \"$1\" \"$2\" "
                                "&& entry \"$2\"",
                                {from, to}));
  auto entries = WARREN_TRY(ParseEntries(r.out));
  if (entries.empty()) return Status(Code::kInternal, "move", from, "no entry");
  return entries[0];
}

Status FsTools::Remove(const std::string& path) {
  return Run("remove", path, "exists \"$1\" || exit 2; rm -rf -- \"$1\"", {path}).status();
}

}  // namespace warren::server::e2b
