#include "sys/backing_dev.h"

#include <fcntl.h>
#include <unistd.h>

#include "base/unique_fd.h"
#include "sys/dir_list.h"

namespace warren::sys {
namespace {
constexpr const char* kBdiDir = "/sys/class/bdi";
}  // namespace

Result<std::set<std::string>> ListBdis(std::string_view prefix) {
  UniqueFd dir(open(kBdiDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return ErrnoStatus("open", kBdiDir);
  std::set<std::string> out;
  for (auto& name : WARREN_TRY(ListDir(dir.get())))
    if (name.compare(0, prefix.size(), prefix) == 0) out.insert(std::move(name));
  return out;
}

std::string NewBdi(const std::set<std::string>& before, const std::set<std::string>& after) {
  std::string found;
  for (const auto& name : after) {
    if (before.count(name)) continue;
    if (!found.empty()) return "";
    found = name;
  }
  return found;
}

Status SetBdiReadaheadKb(const std::string& bdi, uint32_t kb) {
  if (bdi.empty() || bdi.find('/') != std::string::npos || bdi[0] == '.')
    return Invalid("set readahead: bad bdi name", bdi);
  const std::string path = std::string(kBdiDir) + "/" + bdi + "/read_ahead_kb";
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  const std::string text = std::to_string(kb) + "\n";
  if (write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return ErrnoStatus("write", path);
  return Status::Ok();
}

}  // namespace warren::sys
