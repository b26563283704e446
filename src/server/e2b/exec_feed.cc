#include "server/e2b/exec_feed.h"

#include <algorithm>

#include "server/e2b/connect_protocol.h"
#include "server/e2b/envd_messages.h"

namespace warren::server::e2b {

using nlohmann::json;

namespace {

// envd's data events carry at most 32 KiB each; clients size their buffers by it.
constexpr size_t kMaxEventBytes = 32 << 10;

std::string EventFrame(json event) { return Frame({{"event", std::move(event)}}); }

}  // namespace

ExecFeed::ExecFeed(std::shared_ptr<node::ExecRecord> rec, uint32_t pid, bool pty, uint64_t after,
                   std::chrono::milliseconds keepalive, std::optional<Clock::time_point> deadline)
    : rec_(std::move(rec)), pid_(pid), pty_(pty), pacer_(keepalive, deadline), after_(after) {}

std::string ExecFeed::content_type() const { return std::string(kStreamContentType); }

StreamFeed::Take ExecFeed::Poll(std::function<void()> notify) {
  MutexLock lock(&mu_);
  Take t;
  if (ended_) {
    t.done = true;
    return t;
  }
  if (!started_) {
    t.bytes += EventFrame(StartEvent(pid_));
    started_ = true;
  }
  auto snap = rec_->Poll(after_, std::move(notify));
  for (const auto& c : snap.chunks) {
    for (size_t off = 0; off < c.data.size(); off += kMaxEventBytes) {
      std::string_view part = std::string_view(c.data).substr(off, kMaxEventBytes);
      t.bytes += EventFrame(DataEvent(c.stream, part, pty_));
    }
    after_ = c.seq;
  }
  const auto now = Clock::now();
  if (snap.done && snap.chunks.empty()) {
    node::ExecOutcome o = rec_->outcome();
    if (o.timed_out)  // the deadline Start gave it: as envd, the call's deadline passed
      t.bytes += EndStream("deadline_exceeded", "the command's deadline passed");
    else if (o.not_started)  // as envd answers a bad cwd or a missing program
      t.bytes += EndStream("invalid_argument", o.error);
    else if (!o.error.empty() && o.signal.empty())
      t.bytes += EndStream("unavailable", o.error);  // the sandbox died under it
    else
      t.bytes += EventFrame(EndEvent(o)) + EndStream();
    ended_ = t.done = true;
    return t;
  }
  if (pacer_.DeadlinePassed(now)) {
    t.bytes += EndStream("deadline_exceeded", "the call's deadline passed");
    ended_ = t.done = true;
    return t;
  }
  static const std::string kKeepalive = EventFrame(KeepaliveEvent());
  t.wait = pacer_.Pace(now, &t.bytes, kKeepalive);
  return t;
}

}  // namespace warren::server::e2b
