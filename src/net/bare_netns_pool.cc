#include "net/bare_netns_pool.h"

#include <spdlog/spdlog.h>
#include <sys/mount.h>

#include <chrono>
#include <string>

#include "isolation/netns_pristine.h"
#include "net/netns.h"
#include "sys/mount_api.h"
#include "sys/sched_priority.h"

namespace warren::net {
namespace {

// Mounting sysfs needs privilege over the network namespace, which the sandbox lacks: the
// node makes its /sys (it shows this namespace's links) and the agent attaches it. Called
// inside the namespace.
Result<UniqueFd> MakeSysfs() {
  return sys::FsMount("sysfs", "sysfs", {},
                      MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
}

}  // namespace

Result<BareNetns> BareNetnsPool::Make(bool ipv6) {
  BareNetns n;
  n.netns = WARREN_TRY(CreateNetns([&]() -> Status {
    // The sandbox's root is not root of this namespace: let it bind low ports anyway.
    WARREN_RETURN_IF_ERROR(WriteNetSysctl("net/ipv4/ip_unprivileged_port_start", "0"));
    if (ipv6) {
      // eth0's IPv6 (should the sandbox get a link) is what the node gives it, usable at
      // once: no duplicate address detection (the node hands out every address on the
      // bridge), no router solicitations or advertisements, no addresses of its own making;
      // kept while the link is down in mode none (IPv6 otherwise flushes it, and the next
      // egress would find none).
      for (const char* key : {"accept_ra", "autoconf", "accept_dad", "router_solicitations"})
        WARREN_RETURN_IF_ERROR(WriteNetSysctl(std::string("net/ipv6/conf/default/") + key, "0"));
      WARREN_RETURN_IF_ERROR(WriteNetSysctl("net/ipv6/conf/default/keep_addr_on_down", "1"));
    } else {
      // No IPv6 on the links added later; ::1 on lo stays.
      WARREN_RETURN_IF_ERROR(WriteNetSysctl("net/ipv6/conf/default/disable_ipv6", "1"));
    }
    n.sysfs = WARREN_TRY(MakeSysfs());
    return Status::Ok();
  }));
  return n;
}

BareNetnsPool::BareNetnsPool(const BareNetnsOptions& opts) : opts_(opts) {
  if (opts_.target > 0) filler_ = std::thread([this] { Fill(); });
}

BareNetnsPool::~BareNetnsPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (filler_.joinable()) filler_.join();
}

Result<BareNetns> BareNetnsPool::Take(bool* waiting) {
  {
    std::lock_guard lock(mu_);
    if (waiting) *waiting = !ready_.empty();
    if (!ready_.empty()) {
      BareNetns n = std::move(ready_.back());  // the newest: a given-back one is warm
      ready_.pop_back();
      ++hits_;
      cv_.notify_all();
      return n;
    }
    ++misses_;
  }
  cv_.notify_all();
  return Make(opts_.ipv6);
}

bool BareNetnsPool::Reusable(int netns, UniqueFd* sysfs) {
  if (!NodeOwnedNetns(netns)) return false;
  bool ok = false;
  Status st = RunInNetns(netns, [&]() -> Status {
    // Only lo, never a packet, no socket left, every counter 0 (netns_pristine.h).
    if (!warren_netns_pristine("/proc/thread-self/net")) return Status::Ok();
    *sysfs = WARREN_TRY(MakeSysfs());
    ok = true;
    return Status::Ok();
  });
  if (!st.ok()) spdlog::warn("network namespace pool: {}", st.ToString());
  return ok && st.ok();
}

void BareNetnsPool::GiveBack(UniqueFd netns) {
  if (!netns) return;
  {
    std::lock_guard lock(mu_);
    if (ready_.size() >= opts_.keep) {
      ++released_;
      return;
    }
  }
  UniqueFd sysfs;
  const bool reusable = Reusable(netns.get(), &sysfs);
  std::lock_guard lock(mu_);
  if (!reusable || ready_.size() >= opts_.keep) {
    ++released_;
    return;
  }
  ++reused_;
  ready_.push_back({std::move(netns), std::move(sysfs)});
}

void BareNetnsPool::Fill() {
  // Refilling is background work: a Take that finds the pool empty makes its namespace
  // itself, at its caller's priority.
  if (Status st = sys::SetBackgroundPriority(0); !st.ok())
    spdlog::warn("network namespace pool: {}", st.ToString());
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || ready_.size() < opts_.target; });
    if (stop_) return;
    lock.unlock();
    auto made = Make(opts_.ipv6);
    lock.lock();
    if (!made.ok()) {
      spdlog::warn("network namespace pool: {}", made.status().ToString());
      cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_; });
      continue;
    }
    ready_.push_front(std::move(*made));  // behind the given-back ones (Take takes the back)
  }
}

nlohmann::json BareNetnsPool::Info() {
  std::lock_guard lock(mu_);
  return {{"bare", ready_.size()},  {"bare_target", opts_.target}, {"bare_hits", hits_},
          {"bare_misses", misses_}, {"bare_reused", reused_},      {"bare_released", released_}};
}

}  // namespace warren::net
