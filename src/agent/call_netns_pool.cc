#include "agent/call_netns_pool.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

namespace warren::agent {

CallNetns::CallNetns(CallNetns&& o) noexcept
    : ns_(std::move(o.ns_)), probe_(o.probe_), probed_(std::exchange(o.probed_, false)) {}

CallNetns& CallNetns::operator=(CallNetns&& o) noexcept {
  if (this != &o) {
    if (probed_) warren_netns_probe_close(&probe_);
    ns_ = std::move(o.ns_);
    probe_ = o.probe_;
    probed_ = std::exchange(o.probed_, false);
  }
  return *this;
}

CallNetns::~CallNetns() {
  if (probed_) warren_netns_probe_close(&probe_);
}

CallNetnsPool::CallNetnsPool(size_t keep)
    : keep_(keep), self_(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) {
  kept_.reserve(keep);
}

CallNetns CallNetnsPool::Take() {
  if (kept_.empty()) return Make();
  CallNetns ns = std::move(kept_.back());
  kept_.pop_back();
  ++reused_;
  return ns;
}

void CallNetnsPool::Give(CallNetns ns) {
  if (ns.valid() && ns.probed_ && kept_.size() < keep_ &&
      warren_netns_probe_pristine(&ns.probe_) == 1)
    kept_.push_back(std::move(ns));
}  // else `ns` goes here, and the namespace with its last fd

CallNetns CallNetnsPool::Make() {
  CallNetns ns;
  if (!self_.valid() || unshare(CLONE_NEWNET) != 0) return ns;
  // In it now: its fd, and the check's files, each bound to it from here on.
  ns.ns_ = UniqueFd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  ns.probed_ = ns.valid() && warren_netns_probe_open("/proc/thread-self/net", &ns.probe_) == 0;
  // Never clone a call into a namespace another call may be given too (or stay in one).
  if (setns(self_.get(), CLONE_NEWNET) != 0) std::abort();
  ++made_;
  return ns;
}

}  // namespace warren::agent
