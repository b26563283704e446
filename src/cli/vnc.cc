// warren vnc ID [--listen 127.0.0.1:5900]: a desktop sandbox's screen for a person, in any
// VNC client. No password (RFB's own is DES of 8 characters): whoever can connect sees and
// controls the screen with the user's token, so it listens on loopback unless told otherwise. A
// small RFB server (cli/rfb_server.h) on the user's machine, fed through the public API like any
// other client: each frame is GET .../screen (so the sandbox's rate limit, 10 a second, is the
// frame rate), only the rectangle that changed is sent; the viewer's pointer and keys become POST
// .../input actions. The same for every backend.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/common.h"
#include "cli/png_reader.h"
#include "cli/rfb_server.h"
#include "client/http_client.h"

namespace warren::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxViewers = 8;
using nlohmann::json;

bool IsModifier(uint32_t keysym) { return keysym >= 0xffe1 && keysym <= 0xffee; }

std::string KeysymName(uint32_t keysym) {
  char buf[16];
  snprintf(buf, sizeof buf, "0x%x", keysym);
  return buf;
}

// The smallest rectangle holding every pixel that differs; w == 0 if none does.
struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};
Rect Changed(const RgbImage& a, const RgbImage& b) {
  int x0 = a.width, y0 = a.height, x1 = -1, y1 = -1;
  const size_t row = static_cast<size_t>(a.width) * 3;
  for (int y = 0; y < a.height; ++y) {
    const uint8_t* p = a.pixels.data() + row * static_cast<size_t>(y);
    const uint8_t* q = b.pixels.data() + row * static_cast<size_t>(y);
    if (memcmp(p, q, row) == 0) continue;
    y0 = std::min(y0, y), y1 = y;
    for (int x = 0; x < a.width; ++x)
      if (memcmp(p + x * 3, q + x * 3, 3) != 0) {
        x0 = std::min(x0, x);
        x1 = std::max(x1, x);
      }
  }
  if (x1 < 0) return {};
  return {x0, y0, x1 - x0 + 1, y1 - y0 + 1};
}

// One viewer: its own connection to the API, its own last frame.
class VncViewerSession {
 public:
  VncViewerSession(UniqueFd sock, std::string id, int width, int height)
      : rfb_(std::move(sock)),
        path_("/v1/sandboxes/" + client::UrlEncode(id)),
        id_(std::move(id)),
        width_(width),
        height_(height),
        api_(ServerUrl(), Token()) {}

  Status Run() {
    WARREN_RETURN_IF_ERROR(rfb_.Handshake(width_, height_, "warren " + id_));
    for (;;) {
      int wait_ms = -1;
      if (pending_)
        wait_ms = static_cast<int>(std::max<int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(next_fetch_ - Clock::now())
                   .count()));
      pollfd p{rfb_.fd(), POLLIN, 0};
      const int n = poll(&p, 1, wait_ms);
      if (n < 0 && errno != EINTR) return ErrnoStatus("poll", "vnc client");
      if (n > 0) {
        auto m = WARREN_TRY(rfb_.Read());
        WARREN_RETURN_IF_ERROR(Handle(m));
        continue;
      }
      if (pending_ && Clock::now() >= next_fetch_) WARREN_RETURN_IF_ERROR(Frame());
    }
  }

 private:
  Status Handle(const RfbClientMessage& m) {
    using K = RfbClientMessage::Kind;
    if (m.kind == K::kUpdateRequest) {
      pending_ = true;
      if (!m.incremental) full_ = true;
      return Status::Ok();
    }
    json actions = json::array();
    if (m.kind == K::kPointer) {
      const int x = std::min(m.x, width_ - 1), y = std::min(m.y, height_ - 1);
      if (x != x_ || y != y_) actions.push_back({{"type", "move"}, {"x", x}, {"y", y}});
      x_ = x, y_ = y;
      static const char* const kButtons[] = {"left", "middle", "right"};
      for (int b = 0; b < 3; ++b)
        if ((m.buttons ^ buttons_) & (1 << b))
          actions.push_back({{"type", (m.buttons & (1 << b)) ? "mouse_down" : "mouse_up"},
                             {"button", kButtons[b]}});
      // Wheel "buttons" 3-6: a press is one step.
      static const std::pair<const char*, int> kWheel[] = {
          {"dy", -1}, {"dy", 1}, {"dx", -1}, {"dx", 1}};
      for (int b = 3; b < 7; ++b)
        if ((m.buttons & (1 << b)) && !(buttons_ & (1 << b)))
          actions.push_back({{"type", "scroll"}, {kWheel[b - 3].first, kWheel[b - 3].second}});
      buttons_ = m.buttons;
    } else if (m.kind == K::kKey) {
      // Modifiers are held; any other key goes as a chord with the ones held (a viewer sends
      // each key's press and release; the API takes a chord, pressed and released at once).
      if (IsModifier(m.keysym)) {
        auto it = std::find(held_.begin(), held_.end(), m.keysym);
        if (m.down && it == held_.end()) held_.push_back(m.keysym);
        if (!m.down && it != held_.end()) held_.erase(it);
      } else if (m.down) {
        std::string keys;
        for (uint32_t k : held_) keys += KeysymName(k) + "+";
        actions.push_back({{"type", "key"}, {"keys", keys + KeysymName(m.keysym)}});
      }
    }
    if (actions.empty()) return Status::Ok();
    // Over the sandbox's input rate (429): a bare move is dropped (the next supersedes it); a
    // button, wheel or key is sent again a little later, or the screen would keep a button
    // pressed that the viewer released.
    const bool only_move = actions.size() == 1 && actions[0]["type"] == "move";
    Result<client::Response> r = Status(Code::kUnavailable, "send input", id_, "not sent");
    for (int attempt = 0; attempt < 10; ++attempt) {
      r = api_.Request("POST", path_ + "/input", json{{"actions", actions}}.dump());
      if (!r.ok() || r->status != 429 || only_move) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!r.ok()) return r.status();
    if (r->status == 429) return Status::Ok();
    if (r->status == 400) {
      // A key the sandbox has no key for: the viewer goes on.
      fprintf(stderr, "warren vnc: input refused: %s\n", r->body.c_str());
      return Status::Ok();
    }
    return client::ToStatus(*r, "send input to " + id_);
  }

  Status Frame() {
    auto r = api_.Request("GET", path_ + "/screen");
    if (!r.ok()) return r.status();
    if (r->status == 429) {  // the sandbox's screenshot rate: a little later
      next_fetch_ = Clock::now() + std::chrono::milliseconds(150);
      return Status::Ok();
    }
    WARREN_RETURN_IF_ERROR(client::ToStatus(*r, "take a screenshot of " + id_));
    RgbImage frame = WARREN_TRY(DecodePng(r->body, width_, height_));
    next_fetch_ = Clock::now() + std::chrono::milliseconds(100);
    Rect d{0, 0, width_, height_};
    if (!full_ && !last_.pixels.empty()) d = Changed(last_, frame);
    if (d.w == 0) return Status::Ok();  // nothing new: the request waits for a change
    WARREN_RETURN_IF_ERROR(rfb_.SendRect(frame.pixels.data(), width_, d.x, d.y, d.w, d.h));
    last_ = std::move(frame);
    pending_ = full_ = false;
    return Status::Ok();
  }

  RfbSession rfb_;
  const std::string path_, id_;
  const int width_, height_;
  client::HttpClient api_;
  bool pending_ = false, full_ = false;
  Clock::time_point next_fetch_ = Clock::now();
  RgbImage last_;
  int x_ = -1, y_ = -1;
  uint8_t buttons_ = 0;
  std::vector<uint32_t> held_;
};

Result<UniqueFd> Listen(const std::string& where) {
  const size_t colon = where.rfind(':');
  if (colon == std::string::npos) return Invalid("--listen is HOST:PORT", where);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  const std::string host = where.substr(0, colon);
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    return Invalid("--listen takes an IPv4 address", where);
  const int port = atoi(where.c_str() + colon + 1);
  if (port < 1 || port > 65535) return Invalid("--listen port out of range", where);
  a.sin_port = htons(static_cast<uint16_t>(port));
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) return ErrnoStatus("socket", where);
  int one = 1;
  setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return ErrnoStatus("bind", where);
  if (listen(s.get(), 8) != 0) return ErrnoStatus("listen", where);
  return s;
}

int Serve(const std::string& id, const std::string& where, bool once) {
  auto rec = Client().Request("GET", "/v1/sandboxes/" + client::UrlEncode(id));
  if (!rec.ok()) return Fail(rec.status());
  auto doc = client::JsonOf(*rec, "get sandbox " + id);
  if (!doc.ok()) return Fail(doc.status());
  const json display = doc->value("display", json());
  if (!display.is_object())
    return Fail(Status(Code::kConflict, "vnc", id,
                       "the sandbox has no display (create it with --display WxH)"));
  const int w = display.value("width", 0), h = display.value("height", 0);
  auto listener = Listen(where);
  if (!listener.ok()) return Fail(listener.status());
  printf("warren vnc: %s's screen (%dx%d) on %s: connect a VNC client to it\n", id.c_str(), w, h,
         where.c_str());
  fflush(stdout);
  for (;;) {
    UniqueFd c(accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return Fail(ErrnoStatus("accept", where));
    }
    // A few viewers at once (each holds a frame and a connection to the API).
    static std::atomic<int> viewers{0};
    if (viewers.load() >= kMaxViewers) {
      fprintf(stderr, "warren vnc: %d viewers already; one more refused\n", kMaxViewers);
      continue;
    }
    int one = 1;
    setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // A message begun is finished within 30 s, or the viewer is dropped.
    timeval rcv{30, 0};
    setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv);
    auto session = std::make_shared<VncViewerSession>(std::move(c), id, w, h);
    ++viewers;
    auto run = [session, id] {
      Status st = session->Run();
      if (st.code() != Code::kUnavailable || st.message().find("left") == std::string::npos)
        fprintf(stderr, "warren vnc: %s: %s\n", id.c_str(), st.ToString().c_str());
      --viewers;
    };
    if (once) {
      run();
      return 0;
    }
    std::thread(run).detach();  // one viewer each; they end with their connection
  }
}

}  // namespace

void AddVnc(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "vnc", "serve a desktop sandbox's screen to VNC clients (a live view; pointer and keys)");
  auto id = std::make_shared<std::string>();
  auto listen = std::make_shared<std::string>("127.0.0.1:5900");
  auto once = std::make_shared<bool>(false);
  cmd->add_option("id", *id, "sandbox id")->required();
  cmd->add_option("--listen", *listen, "where viewers connect (HOST:PORT)")->capture_default_str();
  cmd->add_flag("--once", *once, "serve one viewer, then exit");
  cmd->callback([id, listen, once] { ExitCode() = Serve(*id, *listen, *once); });
}

}  // namespace warren::cli
