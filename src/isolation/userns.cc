#include "isolation/userns.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace warren::isolation {
namespace {

Status WriteFile(const std::string& path, const std::string& data) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return ErrnoStatus("write", path);
  return Status::Ok();
}

}  // namespace

Status WriteIdMaps(pid_t pid, const IdRange& r) {
  std::string line = "0 " + std::to_string(r.host_base) + " " + std::to_string(r.count) + "\n";
  std::string base = "/proc/" + std::to_string(pid);
  WARREN_RETURN_IF_ERROR(WriteFile(base + "/uid_map", line));
  return WriteFile(base + "/gid_map", line);
}

Result<UniqueFd> OpenUserNs(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/user";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  return fd;
}

}  // namespace warren::isolation
