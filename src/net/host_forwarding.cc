#include "net/host_forwarding.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>

#include "base/unique_fd.h"
#include "net/netns.h"

namespace warren::net {
namespace {

std::string ReadFirstWord(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  in >> v;
  return v;
}

}  // namespace

Result<bool> TurnOnHostForwarding(const std::string& record) {
  const std::string now = ReadFirstWord("/proc/sys/net/ipv4/ip_forward");
  // Written whole under a temporary name and linked into place: the record appears once,
  // complete, whichever of several starting nodes gets there first.
  const std::string tmp = record + ".tmp." + std::to_string(getpid());
  {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) return ErrnoStatus("record host forwarding", record);
    const std::string line = (now == "0" ? "0" : "1") + std::string("\n");
    if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      return ErrnoStatus("record host forwarding", record);
  }
  if (link(tmp.c_str(), record.c_str()) != 0 && errno != EEXIST) {
    Status st = ErrnoStatus("record host forwarding", record);
    unlink(tmp.c_str());
    return st;
  }
  unlink(tmp.c_str());
  const bool was_off = ReadFirstWord(record) == "0";
  WARREN_RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/ip_forward", "1"));
  return was_off;
}

void RestoreHostForwarding(bool others_live, const std::string& record) {
  if (others_live) return;
  if (ReadFirstWord(record) == "0") (void)WriteNetSysctl("net/ipv4/ip_forward", "0");
  unlink(record.c_str());
}

}  // namespace warren::net
