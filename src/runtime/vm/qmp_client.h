// A minimal QEMU Machine Protocol client over a connected stream socket (QEMU's end given to
// it with `-chardev socket,fd=N -mon chardev=...,mode=control`). Synchronous: one command at
// a time, asynchronous events skipped; each reply matched to its request by id.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::runtime::vm {

class QmpClient {
 public:
  explicit QmpClient(UniqueFd sock) : sock_(std::move(sock)) {}
  // Reads the greeting and enters command mode.
  Status Handshake(int timeout_ms);
  // Runs `command`; returns its "return" value, or its "error" as a Status. `pass_fd`, if
  // >= 0, goes along with the command (SCM_RIGHTS), as `getfd` expects.
  Result<nlohmann::json> Execute(const std::string& command, const nlohmann::json& args = nullptr,
                                 int timeout_ms = 10000, int pass_fd = -1);
  int fd() const { return sock_.get(); }

 private:
  Result<nlohmann::json> ReadMessage(int timeout_ms);
  UniqueFd sock_;
  std::string buf_;
  uint64_t next_id_ = 0;
};

}  // namespace warren::runtime::vm
