// WatchFeed: envd's filesystem.WatchDir as a server stream, by polling. Twice a second a
// thread lists the directory in the sandbox (FsTools) and compares it with the last listing:
// a new path is a create event, a gone one a remove, a changed size or time a write, changed
// permissions a chmod. No renames (a rename shows as a remove and a create), and changes
// undone within one period go unseen. The kernel's inotify would see every change, but
// inside the sandbox it needs a watcher process there; polling needs only the image's tools.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "base/thread_annotations.h"
#include "server/e2b/connect_protocol.h"
#include "server/e2b/fs_tools.h"
#include "server/stream_feed.h"

namespace warren::server::e2b {

// Bounds the watches (each a thread listing a directory twice a second) that one sandbox and
// the whole server hold, so that a tenant's loop of WatchDir calls cannot pile up threads.
class WatchSlots : public std::enable_shared_from_this<WatchSlots> {
 public:
  static constexpr int kPerSandbox = 16;
  static constexpr int kPerServer = 512;
  // Held by a feed while it watches.
  class Slot {
   public:
    Slot(std::shared_ptr<WatchSlots> owner, std::string sandbox)
        : owner_(std::move(owner)), sandbox_(std::move(sandbox)) {}
    ~Slot() { owner_->Give(sandbox_); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    std::shared_ptr<WatchSlots> owner_;
    std::string sandbox_;
  };
  // A slot for one more watch of `sandbox`; kQuota when it or the server has its most.
  Result<std::unique_ptr<Slot>> Take(const std::string& sandbox);
  // Waits until every slot is given back (the watch threads left), at most `timeout`.
  void WaitIdle(std::chrono::milliseconds timeout);

 private:
  void Give(const std::string& sandbox);
  Mutex mu_;
  std::condition_variable_any idle_;
  std::map<std::string, int> held_ GUARDED_BY(mu_);
  int total_ GUARDED_BY(mu_) = 0;
};

class WatchFeed : public StreamFeed {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kPeriod{500};
  // Events not yet taken by a client that stopped reading: beyond this the watch ends.
  static constexpr size_t kMaxPendingBytes = 1 << 20;
  // `initial`: the listing at the call (its errors were the call's). The slot goes with the
  // polling thread, which may outlive the feed by one listing.
  WatchFeed(FsTools tools, std::string dir, uint32_t depth, std::vector<EntryInfo> initial,
            std::chrono::milliseconds keepalive, std::optional<Clock::time_point> deadline,
            std::unique_ptr<WatchSlots::Slot> slot);
  // Never waits for the thread (it runs on the front end's event loop): the thread sees the
  // stop at its next turn and leaves, giving back its slot.
  ~WatchFeed() override;
  std::string content_type() const override;
  Take Poll(std::function<void()> notify) override;
  void Cancel() override { Stop(); }

 private:
  struct Seen {
    int64_t size;
    double modified;
    uint32_t mode;
  };
  using Listing = std::map<std::string, Seen>;
  // What the feed and its thread share.
  struct State {
    Mutex mu;
    std::condition_variable_any cv;
    bool stop GUARDED_BY(mu) = false;
    std::string pending GUARDED_BY(mu);  // frames not yet taken
    std::optional<Status> failed GUARDED_BY(mu);
    std::function<void()> notify GUARDED_BY(mu);
  };
  static Listing ListingOf(const std::vector<EntryInfo>& entries);
  static void Loop(std::shared_ptr<State> state, FsTools tools, std::string dir, uint32_t depth,
                   Listing last, std::unique_ptr<WatchSlots::Slot> slot);
  // The events from `before` to `after`, names relative to the watched directory `dir`.
  static std::vector<std::string> Diff(const std::string& dir, const Listing& before,
                                       const Listing& after);
  void Stop();

  StreamPacer pacer_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
  // The feed's own (Poll is called by one coroutine at a time).
  bool started_ = false;
  bool ended_ = false;
};

}  // namespace warren::server::e2b
