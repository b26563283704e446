// StreamFeed: a long-lived reply whose bytes come from elsewhere (a command's output, a watched
// directory), written by the HTTP front end as a chunked body. The front end knows nothing of
// the framing; the feed knows nothing of sockets or Asio. Used by protocols other than the
// contract's NDJSON exec stream, such as the E2B layer's Connect server streams.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace warren::server {

class StreamFeed {
 public:
  virtual ~StreamFeed() = default;
  virtual std::string content_type() const = 0;

  struct Take {
    std::string bytes;  // to write now (may be empty)
    bool done = false;  // the reply ends after `bytes`
    // Poll again after this long even without a notification (keepalives, deadlines).
    std::chrono::milliseconds wait{15000};
  };
  // Never blocks. When there is nothing to write, `notify` is kept and called once (from any
  // thread) on the next change; the front end then polls again.
  virtual Take Poll(std::function<void()> notify) = 0;
  // The client went away or the server stops before `done`: let go of what the feed holds.
  virtual void Cancel() {}
};

}  // namespace warren::server
