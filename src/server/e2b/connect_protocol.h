// The Connect protocol (connectrpc.com/docs/protocol) as E2B's in-sandbox daemon speaks it,
// JSON encoding only: unary calls answer 200 with the message, or an error status with
// {"code": NAME, "message"}; server streams answer 200 application/connect+json with frames
// of 1 flag byte, a 4-byte big-endian length and the JSON, the last flagged 0x02 (end of
// stream), carrying the error if the call failed.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "server/http_service.h"

namespace warren::server::e2b {

// What a tenant may read of `error`: the whole of it, but for an internal one (which may name
// host paths) only its operation; the whole goes to the server's log.
std::string PublicMessage(const Status& error);
// Whether `error` is a full disk (ENOSPC, or a message saying so from inside the sandbox).
bool OutOfSpace(const Status& error);

// Connect's name for an error of Warren code `c`.
const char* ConnectCodeOf(Code c);
// The HTTP status a unary call's error of Connect code `code` is answered with.
int ConnectHttpStatus(std::string_view code);

inline constexpr std::string_view kStreamContentType = "application/connect+json";
inline constexpr uint8_t kEndStreamFlag = 0x02;

// One frame of a stream.
std::string Frame(const nlohmann::json& message, uint8_t flags = 0);
// The end-of-stream frame: {} on success, {"error": {...}} otherwise.
std::string EndStream();
std::string EndStream(std::string_view code, std::string_view message);
std::string EndStream(const Status& error);

// The request message of a server-stream call (one frame, as clients send it).
Result<nlohmann::json> ParseStreamRequest(std::string_view body);
// The request message of a unary call (its JSON body; empty is {}).
Result<nlohmann::json> ParseUnaryRequest(std::string_view body);

// A call's deadline from its Connect-Timeout-Ms header value (none when absent or not a
// positive number; at most a week away).
std::optional<std::chrono::steady_clock::time_point> CallDeadline(std::string_view timeout_ms);
// How long a quiet stream waits before a keepalive, from the Keepalive-Ping-Interval header
// value (seconds; 15 when absent; 1 to 300).
std::chrono::milliseconds KeepaliveInterval(std::string_view seconds);

// The pace of a server stream between its frames: a keepalive after `keepalive` of silence,
// and its deadline.
class StreamPacer {
 public:
  using Clock = std::chrono::steady_clock;
  StreamPacer(std::chrono::milliseconds keepalive, std::optional<Clock::time_point> deadline)
      : keepalive_(keepalive), deadline_(deadline), last_write_(Clock::now()) {}
  bool DeadlinePassed(Clock::time_point now) const { return deadline_ && now >= *deadline_; }
  // Called with what a poll will write (`bytes`): adds `keepalive_frame` to an empty one when
  // silence has lasted long enough, and says how long to wait before polling again.
  std::chrono::milliseconds Pace(Clock::time_point now, std::string* bytes,
                                 const std::string& keepalive_frame);

 private:
  const std::chrono::milliseconds keepalive_;
  const std::optional<Clock::time_point> deadline_;
  Clock::time_point last_write_;
};

// A server stream that fails before it starts: 200 and only the end-of-stream frame with the
// error, as connect-go answers.
HttpReply StreamError(const Status& error);
HttpReply StreamError(std::string_view code, std::string_view message);

HttpReply UnaryOk(const nlohmann::json& message);
HttpReply UnaryError(std::string_view code, std::string_view message);
HttpReply UnaryError(const Status& error);

}  // namespace warren::server::e2b
