// ExecFeed: a Warren exec's output as the server stream of envd's process.Start and
// process.Connect: a start event with the pid, data events, keepalives while quiet, and the
// end event followed by the end of the stream. A stream that reaches its deadline ends with
// deadline_exceeded; the command itself runs on (Start gave it the same deadline, so it ends
// too; a Connect's deadline is only the stream's). A dropped stream never stops the command.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "base/thread_annotations.h"
#include "node/exec_record.h"
#include "server/e2b/connect_protocol.h"
#include "server/stream_feed.h"

namespace warren::server::e2b {

class ExecFeed : public StreamFeed {
 public:
  using Clock = std::chrono::steady_clock;
  // `after`: output after this seq (Connect: what comes from now on).
  ExecFeed(std::shared_ptr<node::ExecRecord> rec, uint32_t pid, bool pty, uint64_t after,
           std::chrono::milliseconds keepalive, std::optional<Clock::time_point> deadline);
  std::string content_type() const override;
  Take Poll(std::function<void()> notify) override;

 private:
  const std::shared_ptr<node::ExecRecord> rec_;
  const uint32_t pid_;
  const bool pty_;
  Mutex mu_;
  StreamPacer pacer_ GUARDED_BY(mu_);
  uint64_t after_ GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;
  bool ended_ GUARDED_BY(mu_) = false;
};

}  // namespace warren::server::e2b
