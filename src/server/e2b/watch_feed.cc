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
}

WatchFeed::WatchFeed(FsTools tools, std::string dir, uint32_t depth, std::vector<EntryInfo> initial,
                     std::chrono::milliseconds keepalive, std::optional<Clock::time_point> deadline,
                     std::unique_ptr<WatchSlots::Slot> slot)
    : tools_(std::move(tools)),
      dir_(std::move(dir)),
      depth_(depth),
      keepalive_(keepalive),
      deadline_(deadline),
      last_write_(Clock::now()),
      last_(ListingOf(initial)),
      slot_(std::move(slot)) {
  thread_ = std::thread([this] { Loop(); });
}

WatchFeed::~WatchFeed() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void WatchFeed::Stop() {
  MutexLock lock(&mu_);
  stop_ = true;
  cv_.notify_all();
}

std::string WatchFeed::content_type() const { return std::string(kStreamContentType); }

WatchFeed::Listing WatchFeed::ListingOf(const std::vector<EntryInfo>& entries) {
  Listing out;
  for (const auto& e : entries) out[e.path] = Seen{e.size, e.modified, e.mode};
  return out;
}

std::vector<std::string> WatchFeed::Diff(const Listing& before, const Listing& after) const {
  std::vector<std::string> frames;
  const std::string prefix = dir_ == "/" ? "/" : dir_ + "/";
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

void WatchFeed::Loop() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      cv_.wait_for(mu_, kPeriod, [&]() REQUIRES(mu_) { return stop_; });
      if (stop_ || failed_) return;
    }
    auto listing = tools_.List(dir_, depth_);
    std::function<void()> notify;
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      if (!listing.ok()) {
        failed_ = listing.status();
      } else {
        Listing now = ListingOf(*listing);
        for (auto& f : Diff(last_, now)) pending_ += f;
        last_ = std::move(now);
        if (pending_.empty()) continue;
      }
      notify = std::move(notify_);
      notify_ = nullptr;
    }
    if (notify) notify();
  }
}

StreamFeed::Take WatchFeed::Poll(std::function<void()> notify) {
  MutexLock lock(&mu_);
  Take t;
  if (ended_) {
    t.done = true;
    return t;
  }
  if (!started_) {
    t.bytes += Frame({{"start", nlohmann::json::object()}});
    started_ = true;
  }
  t.bytes += std::move(pending_);
  pending_.clear();
  const auto now = Clock::now();
  if (failed_ || (deadline_ && now >= *deadline_)) {
    t.bytes += failed_ ? EndStream(*failed_) : EndStream();
    ended_ = t.done = true;
    stop_ = true;
    cv_.notify_all();
    return t;
  }
  if (t.bytes.empty() && now - last_write_ >= keepalive_)
    t.bytes = Frame({{"keepalive", nlohmann::json::object()}});
  if (!t.bytes.empty()) last_write_ = now;
  if (t.bytes.empty()) notify_ = std::move(notify);
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(last_write_ + keepalive_ - now);
  if (deadline_)
    wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ - now));
  t.wait = std::max(wait, std::chrono::milliseconds(1));
  return t;
}

}  // namespace warren::server::e2b
