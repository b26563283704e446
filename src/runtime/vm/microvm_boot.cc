#include "runtime/vm/microvm_boot.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>

namespace warren::runtime::vm {

using nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<UniqueFd> Reopen(const UniqueFd& held, const std::string& what) {
  const std::string self = "/proc/self/fd/" + std::to_string(held.get());
  UniqueFd fd(open(self.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("reopen", what);
  return fd;
}

// Waits for the next agent message on `sock`, giving up if QEMU exits first.
Result<agent::Message> WaitMessage(int sock, int qemu_pidfd, int timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    int64_t left = deadline - NowMs();
    if (left <= 0)
      return Status(Code::kUnavailable, "wait for the guest agent", "microvm", "timed out");
    pollfd p[2] = {{sock, POLLIN, 0}, {qemu_pidfd, POLLIN, 0}};
    int r = poll(p, 2, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("poll", "guest agent");
    if (p[0].revents) return agent::Recv(sock);
    if (p[1].revents)
      return Status(Code::kUnavailable, "wait for the guest agent", "microvm", "QEMU exited");
  }
}

// Loads the template's device state (fd kStateFd, RAM skipped: it is mapped already) and
// runs the guest. A guest saved stopped stays paused after loading until `cont`.
Status Restore(QmpClient& q) {
  WARREN_RETURN_IF_ERROR(
      q.Execute("migrate-set-capabilities",
                {{"capabilities", {{{"capability", "x-ignore-shared"}, {"state", true}}}}})
          .status());
  WARREN_RETURN_IF_ERROR(
      q.Execute("migrate-incoming", {{"uri", "fd:" + std::to_string(kStateFd)}}).status());
  WARREN_RETURN_IF_ERROR(AwaitIncoming(q, "paused", 30000, "restore microvm"));
  return q.Execute("cont").status();
}

Status AwaitIncoming(QmpClient& q, const std::string& want, int timeout_ms,
                     const std::string& what) {
  const int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    json st = WARREN_TRY(q.Execute("query-status"));
    const std::string s = st.value("status", "");
    if (s == want) return Status::Ok();
    if (s != "inmigrate") return Internal(what, "qemu", "state after loading: " + s);
    if (NowMs() > deadline) return Internal(what, "qemu", "loading the state did not finish");
    usleep(2000);
  }
}

Status AwaitMigration(QmpClient& q, int timeout_ms, const std::string& what) {
  const int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    json m = WARREN_TRY(q.Execute("query-migrate"));
    const std::string st = m.value("status", "");
    if (st == "completed") return Status::Ok();
    if (st == "failed" || st == "cancelled")
      return Internal(what, "qemu", "migration " + st + ": " + m.value("error-desc", ""));
    if (NowMs() > deadline) return Internal(what, "qemu", "migration did not finish");
    usleep(5000);
  }
}

std::string Ip4(uint32_t be) {
  char buf[INET_ADDRSTRLEN];
  in_addr a{be};
  return inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "";
}

// The VM's own MAC, locally administered and unique on the node's bridge (from its address);
// not the namespace's eth0 MAC, which that namespace's bridge would drop as its own.
std::string GuestMac(uint32_t be_ip) {
  const auto* b = reinterpret_cast<const uint8_t*>(&be_ip);
  char buf[18];
  snprintf(buf, sizeof buf, "02:57:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3]);
  return buf;
}

std::string HexRandom(size_t n) {
  std::string raw(n, '\0');
  if (getrandom(raw.data(), n, 0) != static_cast<ssize_t>(n)) return "";
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) out += kHex[c >> 4], out += kHex[c & 15];
  return out;
}

Result<UniqueFd> NewRamMemfd(uint64_t ram_mib, const char* name) {
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return ErrnoStatus("memfd_create", "template RAM");
  if (ftruncate(fd.get(), static_cast<off_t>(ram_mib << 20)) != 0)
    return ErrnoStatus("ftruncate", "template RAM");
  return fd;
}

// No VM may change the template's RAM (write() or a shared writable mapping): sealed, the
// memfd can only be mapped privately, copy-on-write.
Status SealRam(int fd, const char* what) {
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return ErrnoStatus("seal", what);
  return Status::Ok();
}

// The screen a VM's record names (written at create, read when a restarted node adopts it).
std::optional<agent::DisplaySize> RecordDisplay(const json& rec) {
  auto d = rec.find("display");
  if (d == rec.end() || !d->is_object()) return std::nullopt;
  const int w = d->value("width", 0), h = d->value("height", 0);
  if (w < 0 || h < 0 ||
      !agent::DisplaySize::Valid(static_cast<uint64_t>(w), static_cast<uint64_t>(h)))
    return std::nullopt;
  return agent::DisplaySize{static_cast<uint16_t>(w), static_cast<uint16_t>(h)};
}

}  // namespace warren::runtime::vm
