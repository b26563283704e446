// Namespaces for the native forker's calls (native_forker.h), kept between calls: one an
// earlier call left exactly as new, or a new one. Making a net or an IPC namespace is among the
// dearest steps of a call's start here (a net namespace: every pernet subsystem's init; an IPC
// namespace: its own mqueue superblock, with a shrinker for every memory cgroup of the host),
// and tearing one down costs a kworker an expedited RCU grace period, while most calls never
// use either.
//
// The forker makes each one (unshare and back), opens its probe in it then (what tells, read
// from outside, whether it is still as new: isolation/ns_probe.h), gives
// it to one pid 1 at a time, and checks it when it sees that pid 1 ended, every process of its
// call gone. Only a namespace owned by a user namespace a call is not root of may be judged so
// (its occupants cannot change what the probe does not read): a runner's calls run as uids of
// their own without capabilities, in the runner's user namespace, which owns these.
//
// Until session 49 the zygote lent the net namespaces (two more messages with an fd each way
// and a wake-up of the zygote a run) and each call's clone made a new IPC namespace.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "isolation/ns_probe.h"

namespace warren::agent {

// A namespace and its probe, owned: closed (and the namespace freed, once no process is in it)
// when dropped. `Probe`: movable, default-constructed empty; bool Open() (run inside the new
// namespace) and bool Pristine() const.
template <class Probe>
class CallNamespace {
 public:
  int fd() const { return ns_.get(); }
  bool valid() const { return ns_.valid(); }

 private:
  template <class>
  friend class CallNsPool;
  UniqueFd ns_;
  Probe probe_;
  bool probed_ = false;  // without an open probe it is never kept
};

template <class Probe>
class CallNsPool {
 public:
  using Namespace = CallNamespace<Probe>;

  // `nstype`: CLONE_NEWNET, CLONE_NEWIPC; `self`: our own, as /proc/thread-self/ns/<name>.
  // Keeps at most `keep` between calls.
  CallNsPool(int nstype, const char* self, size_t keep)
      : nstype_(nstype), keep_(keep), self_path_(self), self_(open(self, O_RDONLY | O_CLOEXEC)) {
    kept_.reserve(keep);
  }

  // One for a call: a kept one, else a new one; an invalid one if none can be made (the
  // caller's clone then makes its own, which is not kept).
  Namespace Take() {
    if (kept_.empty()) return Make();
    Namespace ns = std::move(kept_.back());
    kept_.pop_back();
    ++reused_;
    return ns;
  }

  // A call's, every process of it gone: kept if it is as new and there is room, else freed.
  void Give(Namespace ns) {
    if (ns.valid() && ns.probed_ && kept_.size() < keep_ && ns.probe_.Pristine())
      kept_.push_back(std::move(ns));
  }  // else `ns` goes here, and the namespace with its last fd

  size_t kept() const { return kept_.size(); }
  size_t made() const { return made_; }
  size_t reused() const { return reused_; }

 private:
  Namespace Make() {
    Namespace ns;
    if (!self_.valid() || unshare(nstype_) != 0) return ns;
    // In it now: its fd, and its probe, bound to it from here on.
    ns.ns_ = UniqueFd(open(self_path_, O_RDONLY | O_CLOEXEC));
    ns.probed_ = ns.valid() && ns.probe_.Open();
    // Never clone a call into a namespace another call may be given too (or stay in one).
    if (setns(self_.get(), nstype_) != 0) std::abort();
    ++made_;
    return ns;
  }

  const int nstype_;
  const size_t keep_;
  const char* const self_path_;
  UniqueFd self_;
  std::vector<Namespace> kept_;
  size_t made_ = 0, reused_ = 0;
};

using CallNetns = CallNamespace<isolation::NetnsProbe>;
using CallIpcns = CallNamespace<isolation::IpcnsProbe>;
using CallNetnsPool = CallNsPool<isolation::NetnsProbe>;
using CallIpcnsPool = CallNsPool<isolation::IpcnsProbe>;

inline CallNetnsPool MakeCallNetnsPool(size_t keep) {
  return CallNetnsPool(CLONE_NEWNET, "/proc/thread-self/ns/net", keep);
}
inline CallIpcnsPool MakeCallIpcnsPool(size_t keep) {
  return CallIpcnsPool(CLONE_NEWIPC, "/proc/thread-self/ns/ipc", keep);
}

}  // namespace warren::agent
