#include "server/http_service.h"

namespace warren::server {

HttpReply HttpReply::Json(const nlohmann::json& j, int status) {
  // Output strings are sanitized already; `replace` keeps any stray invalid byte from turning
  // a reply into an exception.
  return Raw(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
             "application/json", status);
}

HttpReply HttpReply::Raw(std::string body, std::string content_type, int status) {
  HttpReply r;
  r.status = status;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

HttpReply HttpReply::Error(Status st) {
  HttpReply r;
  r.kind = kError;
  r.error = st.ok() ? Internal("answer", "", "an error reply without an error") : std::move(st);
  return r;
}

HttpReply HttpReply::Of(const Result<nlohmann::json>& r, int status) {
  return r.ok() ? Json(*r, status) : Error(r.status());
}

HttpReply HttpReply::Of(const Status& st) { return st.ok() ? NoContent() : Error(st); }

HttpReply HttpReply::WaitExec(std::shared_ptr<node::ExecRecord> rec) {
  HttpReply r;
  r.kind = kWaitExec;
  r.exec = std::move(rec);
  return r;
}

HttpReply HttpReply::StreamExec(std::shared_ptr<node::ExecRecord> rec, uint64_t after, bool exact) {
  HttpReply r;
  r.exact = exact;
  r.kind = kStreamExec;
  r.exec = std::move(rec);
  r.after = after;
  return r;
}

HttpReply HttpReply::Feed(std::shared_ptr<StreamFeed> feed) {
  HttpReply r;
  r.kind = kStreamFeed;
  r.feed = std::move(feed);
  return r;
}

int HttpStatusOf(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalid:
      return 400;
    case Code::kNotFound:
      return 404;
    case Code::kConflict:
      return 409;
    case Code::kQuota:
      return 429;
    case Code::kUnauthorized:
      return 401;
    case Code::kForbidden:
      return 403;
    case Code::kUnavailable:
      return 503;
    case Code::kInternal:
      return 500;
  }
  return 500;
}

Result<uint64_t> AfterSeq(const Query& q) {
  auto it = q.find("after");
  if (it == q.end()) return uint64_t{0};
  const std::string& v = it->second;
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
    return Invalid("`after` must be a sequence number (0 or more)");
  return static_cast<uint64_t>(std::stoull(v));
}

}  // namespace warren::server
