// envd's filesystem calls (Stat, ListDir, MakeDir, Move, Remove) done by the sandbox's own
// tools: a small sh script run as the sandbox's root inside its namespaces, so a path (or a
// symlink the occupant planted) is only ever resolved inside the sandbox, never on the host.
// Paths travel as arguments, never inside the script. Needs sh, stat, find, mkdir, mv and rm
// in the image (busybox has them); a name with a newline in it is not supported.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/e2b/envd_messages.h"

namespace warren::server::e2b {

// What a tool run printed and how it ended.
struct ToolOutput {
  int exit_code = -1;
  std::string out, err;
};
using ToolRunner = std::function<Result<ToolOutput>(std::vector<std::string> argv)>;

// An absolute path for `path` as E2B's clients send it (relative: to the user's home, which
// is /root for commands run as root).
std::string ResolvePath(const std::string& path);

// One line of `stat -c '%f|%s|%U|%G|%Y|%n'` as an entry; false if malformed.
bool ParseStatLine(std::string_view line, EntryInfo* e);
// ls -l's permission string for mode bits `mode` (type bits included).
std::string PermissionString(uint32_t mode);

class FsTools {
 public:
  explicit FsTools(ToolRunner run) : run_(std::move(run)) {}
  Result<EntryInfo> Stat(const std::string& path);
  // Entries below `path` down to `depth` levels (1: its own entries).
  Result<std::vector<EntryInfo>> List(const std::string& path, uint32_t depth);
  // kConflict when it exists already (envd's already_exists).
  Result<EntryInfo> MakeDir(const std::string& path);
  Result<EntryInfo> Move(const std::string& from, const std::string& to);
  Status Remove(const std::string& path);

 private:
  Result<ToolOutput> Run(const char* op, const std::string& path, const std::string& script,
                         std::vector<std::string> args);
  ToolRunner run_;
};

}  // namespace warren::server::e2b
