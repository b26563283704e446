// A small synchronous HTTP/1.1 client for the Warren API (used by the CLI and tests), over
// one keep-alive connection. Beast lives in http_client.cc only.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace warren::client {

struct Response {
  int status = 0;
  std::string content_type;
  std::string body;
};

class HttpClient {
 public:
  // url: http://HOST:PORT or https://HOST:PORT (no path; https is verified against the
  // system's roots, or SSL_CERT_FILE / SSL_CERT_DIR). token: bearer token, may be empty.
  HttpClient(std::string url, std::string token);
  ~HttpClient();

  Result<Response> Request(const std::string& method, const std::string& target,
                           const std::string& body = "",
                           const std::string& content_type = "application/json");
  // POSTs/PUTs the contents of a local file as the body.
  Result<Response> UploadFile(const std::string& method, const std::string& target,
                              const std::string& path, const std::string& content_type);
  // GETs an NDJSON stream and calls `on_line` for every line (without the newline). A
  // non-2xx reply becomes the returned status.
  Status StreamLines(const std::string& target,
                     const std::function<void(std::string_view)>& on_line);

  // A connection to a peer whose machine went away (no FIN, no RST) fails after about
  // `seconds` instead of blocking forever: TCP keepalive probes and a user timeout (for
  // servers to servers; set before the first request).
  void DetectDeadPeer(int seconds);
  // From another thread: ends the request or stream in progress (it returns unavailable) by
  // shutting the connection down; with none connected, the next connection attempt fails
  // instead. Requests after that connect afresh.
  void Abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// OK for 2xx; otherwise a Status carrying the server's error code and message.
Status ToStatus(const Response& r, const std::string& what);
// Parses a JSON reply body.
Result<nlohmann::json> JsonOf(const Response& r, const std::string& what);
// Percent-encodes a query value.
std::string UrlEncode(std::string_view s);

}  // namespace warren::client
