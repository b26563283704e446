#include "server/e2b/connect_protocol.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

#include "base/ids.h"
#include "base/utf8.h"

namespace warren::server::e2b {

using nlohmann::json;

std::string PublicMessage(const Status& error) {
  if (error.code() != Code::kInternal) return error.ToString();
  const std::string ref = RandomHex(6);
  spdlog::error("e2b ref={} internal error: {}", ref, error.ToString());
  const std::string op = error.op().empty() ? "request" : error.op();
  return op + ": internal error (ref " + ref + "; the server's log has the details)";
}

bool OutOfSpace(const Status& error) {
  return error.err() == ENOSPC || error.err() == EDQUOT ||
         error.ToString().find("No space left") != std::string::npos;
}

const char* ConnectCodeOf(Code c) {
  switch (c) {
    case Code::kOk:
      return "ok";
    case Code::kInvalid:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kConflict:
      return "failed_precondition";
    case Code::kQuota:
      return "resource_exhausted";
    case Code::kUnauthorized:
      return "unauthenticated";
    case Code::kForbidden:
      return "permission_denied";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

int ConnectHttpStatus(std::string_view code) {
  // connect-go's table (protocol_connect.go, connectCodeToHTTP).
  if (code == "canceled") return 499;
  if (code == "invalid_argument" || code == "failed_precondition" || code == "out_of_range")
    return 400;
  if (code == "deadline_exceeded") return 504;
  if (code == "not_found") return 404;
  if (code == "already_exists" || code == "aborted") return 409;
  if (code == "permission_denied") return 403;
  if (code == "resource_exhausted") return 429;
  if (code == "unimplemented") return 501;
  if (code == "unavailable") return 503;
  if (code == "unauthenticated") return 401;
  return 500;
}

std::string Frame(const json& message, uint8_t flags) {
  std::string body = message.dump(-1, ' ', false, json::error_handler_t::replace);
  const auto n = static_cast<uint32_t>(body.size());
  std::string out;
  out.reserve(5 + body.size());
  out.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out += body;
  return out;
}

std::string EndStream() { return Frame(json::object(), kEndStreamFlag); }

std::string EndStream(std::string_view code, std::string_view message) {
  return Frame({{"error", {{"code", code}, {"message", SanitizeUtf8(message)}}}}, kEndStreamFlag);
}

std::string EndStream(const Status& error) {
  return EndStream(ConnectCodeOf(error.code()), PublicMessage(error));
}

Result<json> ParseStreamRequest(std::string_view body) {
  if (body.size() < 5) return Invalid("a stream's request must be one Connect frame");
  const auto flags = static_cast<uint8_t>(body[0]);
  if (flags & 0x01) return Invalid("compressed Connect frames are not supported");
  uint32_t n = 0;
  for (int i = 1; i <= 4; ++i) n = (n << 8) | static_cast<uint8_t>(body[static_cast<size_t>(i)]);
  if (n != body.size() - 5) return Invalid("a stream's request must be exactly one Connect frame");
  return ParseUnaryRequest(body.substr(5));
}

Result<json> ParseUnaryRequest(std::string_view body) {
  if (body.empty()) return json::object();
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Invalid("the request is not a JSON object");
  return j;
}

std::optional<std::chrono::steady_clock::time_point> CallDeadline(std::string_view timeout_ms) {
  const std::string v(timeout_ms);
  char* end = nullptr;
  const long long ms = v.empty() ? 0 : strtoll(v.c_str(), &end, 10);
  if (ms <= 0 || *end) return std::nullopt;
  constexpr long long kMaxMs = 7LL * 86400 * 1000;
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(std::min(ms, kMaxMs));
}

std::chrono::milliseconds KeepaliveInterval(std::string_view seconds) {
  const std::string v(seconds);
  const long s = v.empty() ? 15 : strtol(v.c_str(), nullptr, 10);
  return std::chrono::seconds(std::clamp(s, 1L, 300L));
}

std::chrono::milliseconds StreamPacer::Pace(Clock::time_point now, std::string* bytes,
                                            const std::string& keepalive_frame) {
  using std::chrono::milliseconds;
  if (bytes->empty() && now - last_write_ >= keepalive_) *bytes = keepalive_frame;
  if (!bytes->empty()) last_write_ = now;
  auto wait = std::chrono::duration_cast<milliseconds>(last_write_ + keepalive_ - now);
  if (deadline_) wait = std::min(wait, std::chrono::duration_cast<milliseconds>(*deadline_ - now));
  return std::max(wait, milliseconds(1));
}

namespace {

class FailedStream : public StreamFeed {
 public:
  explicit FailedStream(std::string frame) : frame_(std::move(frame)) {}
  std::string content_type() const override { return std::string(kStreamContentType); }
  Take Poll(std::function<void()>) override {
    Take t;
    t.bytes = std::move(frame_);
    t.done = true;
    return t;
  }

 private:
  std::string frame_;
};

}  // namespace

HttpReply StreamError(const Status& error) {
  return HttpReply::Feed(std::make_shared<FailedStream>(EndStream(error)));
}

HttpReply StreamError(std::string_view code, std::string_view message) {
  return HttpReply::Feed(std::make_shared<FailedStream>(EndStream(code, message)));
}

HttpReply UnaryOk(const json& message) { return HttpReply::Json(message, 200); }

HttpReply UnaryError(std::string_view code, std::string_view message) {
  return HttpReply::Json({{"code", code}, {"message", SanitizeUtf8(message)}},
                         ConnectHttpStatus(code));
}

HttpReply UnaryError(const Status& error) {
  return UnaryError(ConnectCodeOf(error.code()), PublicMessage(error));
}

}  // namespace warren::server::e2b
