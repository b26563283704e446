#include "server/e2b/watch_feed.h"

#include <algorithm>

#include "server/e2b/connect_protocol.h"

namespace warren::server::e2b {

Result<std::unique_ptr<WatchSlots::Slot>> WatchSlots::Take(const std::string& sandbox) {
  MutexLock lock(&mu_);
  int& held = held_[sandbox];
  if (held >= kPerSandbox || total_ >= kPerServer) {
    if (held == 0) held_.erase(sandbox);
    return Status(
        Code::kQuota, "watch directory", sandbox,
        "too many directory watches (at most " + std::to_string(kPerSandbox) + " per sandbox)");
  }
  ++held;
  ++total_;
  return std::make_unique<Slot>(shared_from_this(), sandbox);
}

void WatchSlots::Give(const std::string& sandbox) {
  MutexLock lock(&mu_);
  --total_;
  if (--held_[sandbox] <= 0) held_.erase(sandbox);
  if (total_ == 0) idle_.notify_all();
}

void WatchSlots::WaitIdle(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  idle_.wait_for(mu_, timeout, [&]() REQUIRES(mu_) { return total_ == 0; });
}

WatchFeed::WatchFeed(FsTools tools, std::string dir, uint32_t depth, std::vector<EntryInfo> initial,
                     std::chrono::milliseconds keepalive, std::optional<Clock::time_point> deadline,
                     std::unique_ptr<WatchSlots::Slot> slot)
    : pacer_(keepalive, deadline) {
  std::thread(Loop, state_, std::move(tools), std::move(dir), depth, ListingOf(initial),
              std::move(slot))
      .detach();
}

WatchFeed::~WatchFeed() { Stop(); }

void WatchFeed::Stop() {
  MutexLock lock(&state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
}

std::string WatchFeed::content_type() const { return std::string(kStreamContentType); }

WatchFeed::Listing WatchFeed::ListingOf(const std::vector<EntryInfo>& entries) {
  Listing out;
  for (const auto& e : entries) out[e.path] = Seen{e.size, e.modified, e.mode};
  return out;
}

std::vector<std::string> WatchFeed::Diff(const std::string& dir, const Listing& before,
                                         const Listing& after) {
  std::vector<std::string> frames;
  const std::string prefix = dir == "/" ? "/" : dir + "/";
  auto name = [&](const std::string& path) {
    return path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : path;
  };
  auto event = [&](const std::string& path, FsEventType t) {
    frames.push_back(Frame(FilesystemEvent(name(path), t)));
  };
  for (const auto& [path, was] : before)
    if (!after.count(path)) event(path, FsEventType::kRemove);
  for (const auto& [path, now] : after) {
    auto it = before.find(path);
    if (it == before.end()) {
      event(path, FsEventType::kCreate);
      // A file that arrived with content: a writer's create and its write, as inotify shows.
      if (now.size > 0) event(path, FsEventType::kWrite);
      continue;
    }
    if (it->second.size != now.size || it->second.modified != now.modified)
      event(path, FsEventType::kWrite);
    if (it->second.mode != now.mode) event(path, FsEventType::kChmod);
  }
  return frames;
}

void WatchFeed::Loop(std::shared_ptr<State> state, FsTools tools, std::string dir, uint32_t depth,
                     Listing last, std::unique_ptr<WatchSlots::Slot> slot) {
  (void)slot;  // held until this thread leaves
  for (;;) {
    {
      MutexLock lock(&state->mu);
      state->cv.wait_for(state->mu, kPeriod, [&]() REQUIRES(state->mu) { return state->stop; });
      if (state->stop || state->failed) return;
    }
    auto listing = tools.List(dir, depth);
    std::function<void()> notify;
    {
      MutexLock lock(&state->mu);
      if (state->stop) return;
      if (!listing.ok()) {
        state->failed = listing.status();
      } else {
        Listing now = ListingOf(*listing);
        for (auto& f : Diff(dir, last, now)) state->pending += f;
        last = std::move(now);
        if (state->pending.size() > kMaxPendingBytes)
          state->failed = Status(Code::kQuota, "watch directory", dir,
                                 "the client does not take the events as fast as they come");
        else if (state->pending.empty())
          continue;
      }
      notify = std::move(state->notify);
      state->notify = nullptr;
    }
    if (notify) notify();
  }
}

StreamFeed::Take WatchFeed::Poll(std::function<void()> notify) {
  Take t;
  if (ended_) {
    t.done = true;
    return t;
  }
  if (!started_) {
    t.bytes += Frame({{"start", nlohmann::json::object()}});
    started_ = true;
  }
  std::optional<Status> failed;
  {
    MutexLock lock(&state_->mu);
    t.bytes += std::move(state_->pending);
    state_->pending.clear();
    failed = state_->failed;
    if (t.bytes.empty()) state_->notify = std::move(notify);
  }
  const auto now = Clock::now();
  if (failed || pacer_.DeadlinePassed(now)) {
    t.bytes += failed ? EndStream(*failed) : EndStream();
    ended_ = t.done = true;
    Stop();
    return t;
  }
  static const std::string kKeepalive = Frame({{"keepalive", nlohmann::json::object()}});
  t.wait = pacer_.Pace(now, &t.bytes, kKeepalive);
  return t;
}

}  // namespace warren::server::e2b
