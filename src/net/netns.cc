#include "net/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <thread>

#include "isolation/net_loopback.h"

namespace warren::net {

Status WriteNetSysctl(const std::string& key, const std::string& value) {
  // /proc/sys/net shows the network namespace of the thread that opens it.
  std::string path = "/proc/sys/" + key;
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open sysctl", key);
  if (write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return ErrnoStatus("write sysctl", key + "=" + value);
  return Status::Ok();
}

Result<UniqueFd> CreateNetns(const std::function<Status()>& inside) {
  Result<UniqueFd> out = Status(Code::kInternal, "create netns", "", "thread did not run");
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      out = ErrnoStatus("unshare", "network namespace");
      return;
    }
    UniqueFd fd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!fd) {
      out = ErrnoStatus("open", "/proc/thread-self/ns/net");
      return;
    }
    Status st = isolation::BringUpLoopback();
    if (st.ok() && inside) st = inside();
    if (!st.ok()) out = st.Context("set up network namespace");
    else out = std::move(fd);
  });
  t.join();
  return out;
}

Status RunInNetns(int netns_fd, const std::function<Status()>& fn) {
  Status st;
  std::thread t([&] {
    if (setns(netns_fd, CLONE_NEWNET) != 0) {
      st = ErrnoStatus("setns", "network namespace");
      return;
    }
    st = fn();
  });
  t.join();
  return st;
}

Result<UniqueFd> OpenHostNetns() {
  UniqueFd fd(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", "/proc/self/ns/net");
  return fd;
}

}  // namespace warren::net
