// The HTTP front end (Boost.Beast + Asio C++20 coroutines) of a service (server/http_service.h):
// the public API of `warren serve` and `warren apiserver`, and a cluster node's API.
//
// Parses requests, authenticates the bearer token and checks its scope, routes to the service
// (run on a blocking thread pool so the event loop never waits on a sandbox), writes JSON, raw or
// NDJSON-streamed replies. Beast is kept inside http_server.cc: it costs ~35 s of compile per
// translation unit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/http_service.h"

namespace warren::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";  // ADDR:PORT, [V6ADDR]:PORT; port 0 picks one
  int io_threads = 2;
  int blocking_threads = 64;
};

class HttpServer {
 public:
  // `service` outlives the server.
  HttpServer(HttpService* service, ServerOptions opts);
  ~HttpServer();
  // Binds and starts serving on background threads.
  Status Start();
  uint16_t port() const;
  // Stops accepting and serving and closes every connection; returns when the threads are
  // gone. The server cannot start again.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace warren::server
