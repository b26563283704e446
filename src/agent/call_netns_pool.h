// The net namespaces of the native forker's calls (native_forker.h): one an earlier call left
// exactly as new, or a new one. Making a net namespace is the dearest single step of a call's
// start here (every pernet subsystem's init, then the same torn down in a kworker behind an
// RCU grace period), and most calls never touch the network.
//
// The forker keeps them itself: it makes each one (unshare and back), keeps the files of its
// check (isolation/netns_pristine.h) open from then on, gives it to one pid 1 at a time and
// checks it once that pid 1 is seen to have ended, every process of its call gone. Until
// session 49 the zygote lent them, and each run cost two more messages with an fd each way
// and a wake-up of the zygote (~0.3 ms of CPU a C++ run here).
//
// Only a namespace owned by a user namespace a call is not root of may be judged so (its
// occupants cannot change what the check does not read): a runner's calls run as uids of
// their own without capabilities, in the runner's user namespace, which owns these.
#pragma once

#include <cstddef>
#include <vector>

#include "base/unique_fd.h"
#include "isolation/netns_pristine.h"

namespace warren::agent {

// A namespace and the files of its check, owned: closed (and the namespace freed, once no
// process is in it) when dropped.
class CallNetns {
 public:
  CallNetns() = default;
  CallNetns(CallNetns&& o) noexcept;
  CallNetns& operator=(CallNetns&& o) noexcept;
  CallNetns(const CallNetns&) = delete;
  CallNetns& operator=(const CallNetns&) = delete;
  ~CallNetns();

  int fd() const { return ns_.get(); }
  bool valid() const { return ns_.valid(); }

 private:
  friend class CallNetnsPool;
  UniqueFd ns_;
  warren_netns_probe probe_{{-1, -1, -1, -1, -1, -1, -1}};
  bool probed_ = false;  // probe_ is open: without it the namespace is never kept
};

class CallNetnsPool {
 public:
  // Keeps at most `keep` namespaces between calls.
  explicit CallNetnsPool(size_t keep);

  // One for a call: a kept one, else a new one; an invalid one if none can be made (the
  // caller's clone then makes its own, which is not kept).
  CallNetns Take();
  // A call's, every process of it gone: kept if it is as new and there is room, else freed.
  void Give(CallNetns ns);

  size_t kept() const { return kept_.size(); }
  size_t made() const { return made_; }
  size_t reused() const { return reused_; }

 private:
  CallNetns Make();

  const size_t keep_;
  UniqueFd self_;  // our own, to come back to after making one
  std::vector<CallNetns> kept_;
  size_t made_ = 0, reused_ = 0;
};

}  // namespace warren::agent
