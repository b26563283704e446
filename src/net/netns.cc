#include "net/netns.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "isolation/net_loopback.h"

namespace warren::net {
namespace {

// The one thread that enters sandboxes' network namespaces, and always comes back to the
// host's before its next task. Long-lived on purpose: a fresh thread costs 10-25 ms of page
// faults here (stack, malloc arena), a task on this one well under a millisecond.
class NetnsWorker {
 public:
  static NetnsWorker& Get() {
    static NetnsWorker* w = new NetnsWorker();  // never destroyed: tasks may run at exit
    return *w;
  }

  Status Run(const std::function<Status()>& task) {
    std::packaged_task<Status()> t([&] { return task(); });
    auto f = t.get_future();
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(t));
    }
    cv_.notify_one();
    return f.get();
  }

  int host_fd() const { return host_.get(); }

 private:
  NetnsWorker() : host_(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) {
    std::thread([this] { Loop(); }).detach();
  }
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !tasks_.empty(); });
      auto t = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      t();
      // Whatever the task did, the next one starts in the host's namespace.
      if (setns(host_.get(), CLONE_NEWNET) != 0) {
        spdlog::critical("network namespace worker cannot return to the host: {}", strerror(errno));
        abort();
      }
      lock.lock();
    }
  }
  UniqueFd host_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Status()>> tasks_;
};

}  // namespace

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
  UniqueFd out;
  Status st = NetnsWorker::Get().Run([&]() -> Status {
    if (unshare(CLONE_NEWNET) != 0) return ErrnoStatus("unshare", "network namespace");
    UniqueFd fd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!fd) return ErrnoStatus("open", "/proc/thread-self/ns/net");
    WARREN_RETURN_IF_ERROR(isolation::BringUpLoopback().Context("set up network namespace"));
    if (inside) WARREN_RETURN_IF_ERROR(inside().Context("set up network namespace"));
    out = std::move(fd);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Status RunInNetns(int netns_fd, const std::function<Status()>& fn) {
  return NetnsWorker::Get().Run([&]() -> Status {
    if (setns(netns_fd, CLONE_NEWNET) != 0) return ErrnoStatus("setns", "network namespace");
    return fn();
  });
}

bool NodeOwnedNetns(int netns_fd) {
  struct stat host_user, owner_st, host_net, net;
  UniqueFd owner(ioctl(netns_fd, NS_GET_USERNS));
  return owner && fstat(owner.get(), &owner_st) == 0 &&
         stat("/proc/self/ns/user", &host_user) == 0 && fstat(netns_fd, &net) == 0 &&
         stat("/proc/self/ns/net", &host_net) == 0 && owner_st.st_ino == host_user.st_ino &&
         owner_st.st_dev == host_user.st_dev &&
         !(net.st_ino == host_net.st_ino && net.st_dev == host_net.st_dev);
}

Result<UniqueFd> OpenHostNetns() {
  UniqueFd fd(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", "/proc/self/ns/net");
  return fd;
}

}  // namespace warren::net
