#include "runtime/vm/qmp_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "sys/fd_passing.h"

namespace warren::runtime::vm {

using nlohmann::json;

Result<json> QmpClient::ReadMessage(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      json j = json::parse(buf_.substr(0, nl), nullptr, /*allow_exceptions=*/false);
      buf_.erase(0, nl + 1);
      if (j.is_discarded() || !j.is_object()) return Invalid("malformed QMP message", "qemu");
      return j;
    }
    if (buf_.size() > (1u << 20)) return Invalid("QMP message too long", "qemu");
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return Status(Code::kUnavailable, "read QMP reply", "qemu", "no answer in time");
    pollfd p{sock_.get(), POLLIN, 0};
    int r = poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("poll", "qemu monitor");
    if (r == 0) continue;
    char tmp[8192];
    ssize_t n = read(sock_.get(), tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read", "qemu monitor");
    if (n == 0)
      return Status(Code::kUnavailable, "read QMP reply", "qemu", "monitor closed (QEMU exited)");
    buf_.append(tmp, static_cast<size_t>(n));
  }
}

Status QmpClient::Handshake(int timeout_ms) {
  json greeting = WARREN_TRY(ReadMessage(timeout_ms));
  if (!greeting.contains("QMP")) return Invalid("no QMP greeting", "qemu");
  return Execute("qmp_capabilities", nullptr, timeout_ms).status();
}

Result<json> QmpClient::Execute(const std::string& command, const json& args, int timeout_ms,
                                int pass_fd) {
  // Each request carries an id and only its own reply is taken: after a timeout, the late
  // reply of that request is read past, never mistaken for the next one's.
  const uint64_t id = ++next_id_;
  json req = {{"execute", command}, {"id", id}};
  if (!args.is_null()) req["arguments"] = args;
  const std::string line = req.dump() + "\n";
  if (pass_fd >= 0) {
    WARREN_RETURN_IF_ERROR(sys::SendWithFds(sock_.get(), line, {pass_fd}));
  } else {
    size_t off = 0;
    while (off < line.size()) {
      ssize_t n = send(sock_.get(), line.data() + off, line.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus("send QMP " + command, "qemu monitor");
      off += static_cast<size_t>(n);
    }
  }
  for (;;) {
    json m = WARREN_TRY(ReadMessage(timeout_ms));
    if (m.contains("event")) continue;
    if (auto got = m.find("id"); got == m.end() || *got != id) continue;  // an earlier one's
    if (m.contains("error")) {
      return Status(Code::kInternal, "qemu " + command, "qmp",
                    m["error"].value("desc", m["error"].dump()));
    }
    if (m.contains("return")) return m["return"];
  }
}

}  // namespace warren::runtime::vm
