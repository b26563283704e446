#include "agent/desktop.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "agent/png_writer.h"
#include "agent/xorg_config.h"

namespace warren::agent {
namespace {

constexpr const char* kLog = "/tmp/.warren-display.log";
constexpr const char* kXorgConfig = "/tmp/.warren-xorg.conf";
constexpr int kDisplay = 0;

pid_t StartProgram(ChildSpec spec, std::vector<std::string> argv, int log_fd, int null_fd) {
  spec.argv = std::move(argv);
  spec.stdin_fd = null_fd;
  spec.stdout_fd = log_fd;
  spec.stderr_fd = log_fd;
  spec.tty = false;
  const Spawned child = SpawnChild(spec);
  if (child.pid < 0) return -1;
  // A failed exec (no such program) is reported in the spawn, and the child exits 127.
  if (child.failed_stage) {
    waitpid(child.pid, nullptr, 0);
    return -2;
  }
  return child.pid;
}

// What /proc says of process `pid`: its state letter and its CPU time so far (user + system,
// in clock ticks); ticks -1 once it is gone.
struct ProcSample {
  char state = '?';
  long ticks = -1;
  bool operator==(const ProcSample&) const = default;
};

ProcSample SampleProc(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return {};
  char buf[1024];
  ssize_t n = read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  // After "(comm)", which may hold spaces: state is field 3, utime 14 and stime 15.
  const char* p = strrchr(buf, ')');
  if (!p) return {};
  char state = '?';
  unsigned long utime = 0, stime = 0;
  if (sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &state, &utime, &stime) !=
      3)
    return {};
  return {state, static_cast<long>(utime + stime)};
}

// Waits until the window manager and the X server have both been asleep in their event loops
// for 200 ms (state S, no CPU used), within `max_ms`. CPU time alone is not enough: on a busy
// host, and more so in an emulated guest, a manager still reading its theme from disk (state
// D) or waiting for its turn (R) uses no CPU for a while without being ready.
void WaitIdle(pid_t wm, pid_t x_server, int max_ms) {
  ProcSample last_wm = SampleProc(wm), last_x = SampleProc(x_server);
  int quiet_ms = 0;
  for (int waited = 0; waited < max_ms && quiet_ms < 200 && last_wm.ticks >= 0; waited += 50) {
    timespec fifty_ms{0, 50 * 1000 * 1000};
    nanosleep(&fifty_ms, nullptr);
    const ProcSample now_wm = SampleProc(wm), now_x = SampleProc(x_server);
    const bool asleep = now_wm.state == 'S' && (now_x.ticks < 0 || now_x.state == 'S');
    quiet_ms = asleep && now_wm == last_wm && now_x == last_x ? quiet_ms + 50 : 0;
    last_wm = now_wm;
    last_x = now_x;
  }
}

}  // namespace

Status Desktop::Start(const ChildSpec& base, uint16_t width, uint16_t height, bool device) {
  if (started()) return Status::Ok();
  mkdir("/tmp/.X11-unix", 01777);
  // The image's /tmp is not ours: whatever stands at these names (a FIFO, a link to another
  // file) goes, and the files are made afresh.
  unlink(kLog);
  unlink(kXorgConfig);
  UniqueFd log(open(kLog, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644));
  UniqueFd null(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!log || !null) return ErrnoStatus("open", kLog);
  ChildSpec spec = base;
  spec.env.push_back("DISPLAY=:" + std::to_string(kDisplay));
  const std::string display = ":" + std::to_string(kDisplay);
  std::vector<std::string> argv;
  const char* server = device ? "Xorg" : "Xvfb";
  if (device) {
    // The machine's own screen (backend vm): Xorg on its display device, configured here.
    const std::string tablet = WARREN_TRY(FindInputDevice("Tablet", 5000));
    const std::string keyboard = WARREN_TRY(FindInputDevice("Keyboard", 5000));
    const std::string conf = XorgConfig(DisplaySize{width, height}, tablet, keyboard);
    UniqueFd f(open(kXorgConfig, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!f || write(f.get(), conf.data(), conf.size()) != static_cast<ssize_t>(conf.size()))
      return ErrnoStatus("write", kXorgConfig);
    // vt7, as display managers do; -s 0 -dpms: the screen never blanks.
    argv = {"Xorg",     display, "-config", kXorgConfig, "-nolisten",   "tcp",
            "-noreset", "-s",    "0",       "-dpms",     "-novtswitch", "vt7"};
  } else {
    const std::string screen = std::to_string(width) + "x" + std::to_string(height) + "x24";
    argv = {"Xvfb", display, "-screen", "0", screen, "-nolisten", "tcp", "-noreset", "-s", "0"};
  }
  xvfb_pid_ = StartProgram(spec, argv, log.get(), null.get());
  if (xvfb_pid_ == -2) {
    xvfb_pid_ = -1;
    return Status(
        Code::kInvalid, "start the display", server,
        std::string("the image has no ") + server +
            ": make a desktop image (warren image build NAME --debian bookworm "
            "--desktop) or install the " +
            (device ? "xserver-xorg-core and xserver-xorg-input-evdev packages" : "xvfb package"));
  }
  if (xvfb_pid_ < 0) return ErrnoStatus("start", server);
  // Ready when it takes a connection (the lock file and socket come first, then the screen).
  // Xorg on an emulated machine (TCG) takes longer than Xvfb: up to 60 s.
  const int tries = device ? 6000 : 1500;
  for (int i = 0; i < tries && !x_; ++i) {
    if (xvfb_status_) break;
    auto c = X11Connection::Open(kDisplay);
    if (c.ok()) {
      x_.emplace(std::move(*c));
      break;
    }
    int status = 0;
    if (waitpid(xvfb_pid_, &status, WNOHANG) == xvfb_pid_) xvfb_status_ = status;
    timespec ten_ms{0, 10 * 1000 * 1000};
    nanosleep(&ten_ms, nullptr);
  }
  if (!x_)
    return Status(Code::kUnavailable, "start the display", server,
                  (xvfb_status_ ? std::string("it exited")
                                : "it did not take connections within " +
                                      std::to_string(tries / 100) + " s") +
                      ": " + LogTail());
  // The image's window manager, if it has one (Debian's alternative for it). Ready once it
  // manages the screen (EWMH's mark on the root window), so that a first click already goes
  // to it; a manager without the mark gets 5 s.
  if (pid_t wm = StartProgram(spec, {"x-window-manager"}, log.get(), null.get()); wm > 0) {
    for (int i = 0; i < 500; ++i) {
      auto managed = x_->RootHasProperty("_NET_SUPPORTING_WM_CHECK");
      if (!managed.ok() || *managed) break;
      timespec ten_ms{0, 10 * 1000 * 1000};
      nanosleep(&ten_ms, nullptr);
    }
    // The mark comes early in a manager's start; the rest (its theme, fonts, menus: openbox
    // takes 2 s here) must be done too, or the first clicks go nowhere. Done is when it has
    // been asleep for 200 ms, within 30 s (an emulated guest on a busy host is slow).
    WaitIdle(wm, xvfb_pid_, 30000);
  }
  return Status::Ok();
}

void Desktop::Reaped(pid_t pid, int status) {
  if (pid == xvfb_pid_) {
    xvfb_status_ = status;
    x_.reset();
  }
}

std::string Desktop::LogTail() const {
  UniqueFd fd(open(kLog, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) return "no log";
  std::string all(8192, '\0');
  ssize_t n = pread(fd.get(), all.data(), all.size(), 0);
  all.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (all.size() > 600) all = "..." + all.substr(all.size() - 600);
  return all.empty() ? "its log is empty" : "its log: " + all;
}

Result<X11Connection*> Desktop::Connection() {
  if (!started()) return Status(Code::kConflict, "screen", "display", "the display is not started");
  if (xvfb_status_)
    return Status(Code::kUnavailable, "screen", "Xvfb", "the X server has ended: " + LogTail());
  if (!x_) x_.emplace(WARREN_TRY(X11Connection::Open(kDisplay)));
  return &*x_;
}

Result<std::string> Desktop::ScreenshotPng() {
  X11Connection* x = WARREN_TRY(Connection());
  PngWriter png(x->width(), x->height());
  constexpr uint16_t kBand = 64;  // rows per request: a 3840-wide band is 1 MiB of pixels
  for (uint16_t y = 0; y < x->height(); y = static_cast<uint16_t>(y + kBand)) {
    const uint16_t rows = std::min<uint16_t>(kBand, static_cast<uint16_t>(x->height() - y));
    auto band = x->CaptureRgb(y, rows);
    if (!band.ok()) {
      x_.reset();  // reconnect next time
      return band.status();
    }
    WARREN_RETURN_IF_ERROR(png.AddRows(*band, rows));
  }
  return png.Finish();
}

Status Desktop::Perform(const std::vector<agent::InputStep>& steps) {
  X11Connection* x = WARREN_TRY(Connection());
  using K = agent::InputStep::Kind;
  auto chord = [&](const std::vector<uint32_t>& keysyms) -> Status {
    std::vector<uint8_t> codes;
    bool shifted = false;
    for (uint32_t ks : keysyms) {
      auto code = WARREN_TRY(x->KeycodeFor(ks));
      codes.push_back(code.first);
      shifted = shifted || code.second;
    }
    // "ctrl+S" or "ctrl+?": the key's second level needs Shift, held first.
    if (shifted) codes.insert(codes.begin(), WARREN_TRY(x->KeycodeFor(0xffe1)).first);
    for (uint8_t c : codes) WARREN_RETURN_IF_ERROR(x->Key(c, true));
    for (size_t i = codes.size(); i-- > 0;) WARREN_RETURN_IF_ERROR(x->Key(codes[i], false));
    return Status::Ok();
  };
  for (const auto& s : steps) {
    Status st;
    switch (s.kind) {
      case K::kMove:
        st = x->MovePointer(s.x, s.y);
        break;
      case K::kButton:
        st = x->Button(s.button, s.down);
        break;
      case K::kKeys:
        st = chord(s.keysyms);
        break;
      case K::kText:
        for (char32_t c : s.text) {
          // Latin-1 keysyms are the code point; newline and tab are keys; the rest of
          // Unicode is 0x01000000 + the code point (X11's keysym encoding).
          const uint32_t ks = c == U'\n'   ? 0xff0d
                              : c == U'\t' ? 0xff09
                              : (c >= 0x20 && c <= 0x7e) || (c >= 0xa0 && c <= 0xff)
                                  ? static_cast<uint32_t>(c)
                                  : 0x01000000u | static_cast<uint32_t>(c);
          auto code = x->KeycodeFor(ks);
          if (!code.ok()) return code.status();
          uint8_t shift = 0;
          if (code->second) {
            auto sc = WARREN_TRY(x->KeycodeFor(0xffe1));  // Shift_L
            shift = sc.first;
            WARREN_RETURN_IF_ERROR(x->Key(shift, true));
          }
          WARREN_RETURN_IF_ERROR(x->Key(code->first, true));
          WARREN_RETURN_IF_ERROR(x->Key(code->first, false));
          if (shift) WARREN_RETURN_IF_ERROR(x->Key(shift, false));
        }
        break;
      case K::kWait:
        WARREN_RETURN_IF_ERROR(x->Sync());
        std::this_thread::sleep_for(std::chrono::milliseconds(s.ms));
        break;
    }
    if (!st.ok()) {
      x_.reset();
      return st;
    }
  }
  return x->Sync();
}

}  // namespace warren::agent
