// HttpService: what an HTTP front end (server/http_server.h) serves, without HTTP or Asio. A
// service names its routes (server/route_table.h), says who an Authorization header stands
// for, and answers one routed request at a time on a blocking thread. The front end does the
// rest the same way for every service: parsing, body limits, scopes, 404/405, error bodies,
// request ids and logs, keep-alive, and the long-lived replies (waiting for an exec, or its
// NDJSON stream), which it runs on its event loop rather than on a blocking thread.
//
// Three services use it: the public API (server/api_service.h), E2B's API beside it
// (server/e2b/e2b_service.h, joined by server/service_chain.h) and a cluster node's API for
// API servers (cluster/node_service.h).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "node/exec_record.h"
#include "server/auth.h"
#include "server/route_table.h"
#include "server/stream_feed.h"

namespace warren::server {

using Query = std::map<std::string, std::string>;
// Request headers by lower-case name; a repeated header's values joined by ", ".
using Headers = std::map<std::string, std::string>;

// BodyTo::kStream: the request's body as it arrives, read by the handler while the front end
// still receives it (nothing is held whole, in memory or on disk).
class BodyStream {
 public:
  virtual ~BodyStream() = default;
  // Up to `n` bytes into `buf`, blocking until some arrive: how many; 0 at the end of the
  // body; kInvalid if the body was cut off (the client went away, or sent more than the
  // route's limit).
  virtual Result<size_t> Read(char* buf, size_t n) = 0;
};

// One request as routed and read.
struct HttpRequest {
  const Principal& who;
  const PathParams& params;
  const Query& query;
  std::string body;       // BodyTo::kMemory
  std::string body_file;  // BodyTo::kFile: removed after the handler
  const Headers& headers;
  BodyStream* body_stream = nullptr;  // BodyTo::kStream
  // The request's header value of lower-case `name`, "" when absent.
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One answer: a body, an error, an exec whose end (kWaitExec) or stream (kStreamExec) the
// front end serves, or a feed it writes out as a chunked body (kStreamFeed).
struct HttpReply {
  enum Kind { kBody, kError, kWaitExec, kStreamExec, kStreamFeed };
  Kind kind = kBody;
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Status error;                            // kError
  std::shared_ptr<node::ExecRecord> exec;  // kWaitExec, kStreamExec
  uint64_t after = 0;                      // kStreamExec: output after this seq
  // kStreamExec: every line carries `data_b64` too, the chunk's bytes exactly (a mirror of the
  // exec elsewhere rebuilds its output from them; `data` is sanitized chunk by chunk).
  bool exact = false;
  std::shared_ptr<StreamFeed> feed;  // kStreamFeed
  // Extra response headers (kBody, kStreamFeed): paging tokens, Retry-After of a protocol
  // that shapes its own errors.
  std::vector<std::pair<std::string, std::string>> headers;

  static HttpReply Json(const nlohmann::json& j, int status = 200);
  static HttpReply Raw(std::string body, std::string content_type, int status = 200);
  static HttpReply NoContent() { return Raw("", "", 204); }
  static HttpReply Error(Status st);
  // `r`'s value as JSON with `status`, or its error.
  static HttpReply Of(const Result<nlohmann::json>& r, int status = 200);
  // 204, or the error.
  static HttpReply Of(const Status& st);
  static HttpReply WaitExec(std::shared_ptr<node::ExecRecord> rec);
  static HttpReply StreamExec(std::shared_ptr<node::ExecRecord> rec, uint64_t after,
                              bool exact = false);
  static HttpReply Feed(std::shared_ptr<StreamFeed> feed);
};

// The HTTP status an error of `code` is answered with (400, 404, 409, 429, 401, 403, 503, 500).
int HttpStatusOf(Code code);

// The `after` query parameter of a stream (a sequence number, 0 when absent).
Result<uint64_t> AfterSeq(const Query& q);

class HttpService {
 public:
  virtual ~HttpService() = default;
  virtual const RouteTable& routes() const = 0;
  // The principal behind an Authorization header value, or nullopt (401).
  virtual std::optional<Principal> Authenticate(std::string_view authorization) const = 0;
  // Answers request `req` to route `route` (an index into routes()). Runs on a blocking
  // thread; an exception becomes a 500.
  virtual HttpReply Handle(int route, HttpRequest& req) = 0;
  // Whether a request to `route` may go on, from its headers alone, before its body is read:
  // services whose routes authenticate by other headers than Authorization (E2B's X-API-Key)
  // refuse strangers here rather than after taking their upload. The error is answered.
  virtual Status Admit(int route, const Headers& headers) {
    (void)route;
    (void)headers;
    return Status::Ok();
  }
  // The answer to a request Admit refused, in the service's own error shape.
  virtual HttpReply Refusal(int route, const Status& refused) {
    (void)route;
    return HttpReply::Error(refused);
  }
  // A fresh path for a BodyTo::kFile upload ("": the service takes none).
  virtual std::string UploadPath() const { return ""; }
  // Every error answered, by code (metrics).
  virtual void CountError(Code) {}
};

}  // namespace warren::server
