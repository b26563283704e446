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

Status WriteValue(const std::string& path, const std::string& value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open sysctl", path);
  if (write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return ErrnoStatus("write sysctl", path + "=" + value);
  return Status::Ok();
}

// Writes `what` as the record unless one is there already; answers the record's word.
// Written whole under a temporary name and linked into place: the record appears once,
// complete, whichever of several starting nodes gets there first.
Result<std::string> RecordOnce(const std::string& record, const std::string& what) {
  const std::string tmp = record + ".tmp." + std::to_string(getpid());
  {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) return ErrnoStatus("record host forwarding", record);
    const std::string line = what + "\n";
    if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      Status st = ErrnoStatus("record host forwarding", record);
      unlink(tmp.c_str());
      return st;
    }
  }
  if (link(tmp.c_str(), record.c_str()) != 0 && errno != EEXIST) {
    Status st = ErrnoStatus("record host forwarding", record);
    unlink(tmp.c_str());
    return st;
  }
  unlink(tmp.c_str());
  return ReadFirstWord(record);
}

// The IPv6 record's words: what the host did before the first node.
constexpr const char* kGlobal = "global";  // conf/all/forwarding was on: nothing to do
constexpr const char* kForced = "forced";  // force_forwarding was on everywhere already
constexpr const char* kOff = "off";        // we turn force_forwarding on, and back off

}  // namespace

Result<bool> TurnOnHostForwarding(const std::string& record) {
  const std::string now = ReadFirstWord("/proc/sys/net/ipv4/ip_forward");
  const std::string before = WARREN_TRY(RecordOnce(record, now == "0" ? "0" : "1"));
  WARREN_RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/ip_forward", "1"));
  return before == "0";
}

void RestoreHostForwarding(bool others_live, const std::string& record) {
  if (others_live) return;
  if (ReadFirstWord(record) == "0") (void)WriteNetSysctl("net/ipv4/ip_forward", "0");
  unlink(record.c_str());
}

Result<Forwarding6> TurnOnHostForwarding6(const std::string& record,
                                          const std::string& proc_sys_net) {
  const std::string conf = proc_sys_net + "/ipv6/conf/";
  if (ReadFirstWord(conf + "all/disable_ipv6") != "0") return Forwarding6::kUnavailable;
  const bool global = ReadFirstWord(conf + "all/forwarding") == "1";
  const std::string forced = ReadFirstWord(conf + "all/force_forwarding");
  if (!global && forced.empty()) return Forwarding6::kUnavailable;  // a kernel before 6.17
  const std::string before = WARREN_TRY(RecordOnce(record, global          ? kGlobal
                                                           : forced == "1" ? kForced
                                                                           : kOff));
  if (before == kGlobal) return Forwarding6::kWasOn;
  // "all" sets every interface's switch, "default" those made later (other nodes' bridges).
  WARREN_RETURN_IF_ERROR(WriteValue(conf + "all/force_forwarding", "1"));
  WARREN_RETURN_IF_ERROR(WriteValue(conf + "default/force_forwarding", "1"));
  return before == kOff ? Forwarding6::kWasOff : Forwarding6::kWasOn;
}

void RestoreHostForwarding6(bool others_live, const std::string& record,
                            const std::string& proc_sys_net) {
  if (others_live) return;
  if (ReadFirstWord(record) == kOff) {
    const std::string conf = proc_sys_net + "/ipv6/conf/";
    (void)WriteValue(conf + "default/force_forwarding", "0");
    (void)WriteValue(conf + "all/force_forwarding", "0");
  }
  unlink(record.c_str());
}

}  // namespace warren::net
