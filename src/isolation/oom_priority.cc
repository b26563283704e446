#include "isolation/oom_priority.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "base/unique_fd.h"

namespace warren::isolation {

Status SetOomScoreAdj(pid_t pid, int adj) {
  const std::string path = "/proc/" + std::to_string(pid) + "/oom_score_adj";
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return NotFound("process", std::to_string(pid));
    return ErrnoStatus("open", path);
  }
  const std::string v = std::to_string(std::clamp(adj, -1000, 1000));
  if (write(fd.get(), v.data(), v.size()) != static_cast<ssize_t>(v.size())) {
    if (errno == ESRCH) return NotFound("process", std::to_string(pid));
    return ErrnoStatus("write oom_score_adj of", std::to_string(pid));
  }
  return Status::Ok();
}

}  // namespace warren::isolation
