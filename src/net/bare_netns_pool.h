// The node's bare network namespaces (`lo` only) for sandboxes without a link: made ahead of
// demand by a background thread, and lent again when a sandbox's namespace comes back exactly
// as new (isolation/netns_pristine.h). Making one costs ~0.5 ms here and tearing it down about as
// much again in a kworker, with an expedited RCU grace period; checking one that came back
// costs ~70 us. Every namespace here is owned by the host's user namespace, so its occupants
// (root only in their own user namespace) can change nothing in it but what the check reads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::net {

struct BareNetns {
  UniqueFd netns;
  UniqueFd sysfs;  // a detached, read-only sysfs made in it: the sandbox's /sys
};

struct BareNetnsOptions {
  // Whether links added later (a sandbox switched to egress) may carry IPv6: the namespace's
  // defaults for new links (net/network.h).
  bool ipv6 = false;
  size_t target = 8;  // kept ready by the background thread
  size_t keep = 16;   // at most this many waiting, made and given back together
};

class BareNetnsPool {
 public:
  explicit BareNetnsPool(const BareNetnsOptions& opts);
  ~BareNetnsPool();
  BareNetnsPool(const BareNetnsPool&) = delete;
  BareNetnsPool& operator=(const BareNetnsPool&) = delete;

  // A new namespace as the node sets one up (lo up, the sysctls a sandbox root cannot write
  // itself, a sysfs), owned by the host's user namespace. `ipv6`: see BareNetnsOptions.
  static Result<BareNetns> Make(bool ipv6);

  // One for a new sandbox: a waiting one, else one made now (`*waiting` says which).
  Result<BareNetns> Take(bool* waiting = nullptr);
  // The namespace of a sandbox all of whose processes have ended. Kept for a later Take if
  // it is the node's (owned by the host's user namespace, not the host's own), pristine, and
  // there is room; otherwise it goes with `netns`.
  void GiveBack(UniqueFd netns);

  nlohmann::json Info();

 private:
  void Fill();
  // Whether `netns` may be lent again (its check runs on the namespace worker), with a new
  // sysfs for it in `sysfs`.
  bool Reusable(int netns, UniqueFd* sysfs);

  const BareNetnsOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<BareNetns> ready_;
  uint64_t hits_ = 0, misses_ = 0, reused_ = 0, released_ = 0;
  std::thread filler_;
};

}  // namespace warren::net
