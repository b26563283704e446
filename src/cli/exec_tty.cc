// warren exec -t [-i] ID -- CMD: the command on a terminal of its own in the sandbox (its
// devpts), ours in raw mode; the window's size follows ours, and with -i every key goes to it
// as it is typed (^C included: the remote terminal turns it into SIGINT there).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

#include "base/unique_fd.h"
#include "base/utf8.h"
#include "cli/common.h"
#include "cli/terminal.h"
#include "client/http_client.h"

namespace warren::cli {
namespace {

// Runs on its own thread and connection while the main one streams the output: sends what
// we type (with -i) and each new window size, until `stop_fd` is readable.
class InputPump {
 public:
  InputPump(std::string exec_path, bool forward_stdin, int winch_fd, int stop_fd)
      : path_(std::move(exec_path)),
        forward_stdin_(forward_stdin),
        winch_fd_(winch_fd),
        stop_fd_(stop_fd),
        client_(ServerUrl(), Token()) {}

  void Run() {
    char buf[64 * 1024];
    for (;;) {
      pollfd fds[3] = {{stop_fd_, POLLIN, 0}, {winch_fd_, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      const nfds_t n = forward_stdin_ ? 3 : 2;
      if (poll(fds, n, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents) {
        signalfd_siginfo si;
        while (read(winch_fd_, &si, sizeof si) > 0) {
        }
        if (auto size = TerminalSizeOf(STDOUT_FILENO))
          (void)client_.Request("POST", path_ + "/resize",
                                nlohmann::json{{"rows", size->rows}, {"cols", size->cols}}.dump());
      }
      if (n == 3 && fds[2].revents) {
        ssize_t got = read(STDIN_FILENO, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        // Our input ended (a pipe, or ^D on a terminal in raw mode reaches the command as a
        // byte and never ends it here): the command's terminal gets its end-of-file.
        nlohmann::json req =
            got > 0
                ? nlohmann::json{{"data_b64",
                                  Base64Encode(std::string_view(buf, static_cast<size_t>(got)))}}
                : nlohmann::json{{"eof", true}};
        if (!Send(req.dump()) || got <= 0) forward_stdin_ = false;
      }
    }
  }

 private:
  // False once the command takes no more input (it ended, or its stdin is closed).
  bool Send(const std::string& body) {
    for (;;) {
      auto r = client_.Request("POST", path_ + "/input", body);
      if (!r.ok()) return false;
      // 429: the command is not reading yet; what it has not read waits in its terminal.
      if (r->status == 429) {
        pollfd stop{stop_fd_, POLLIN, 0};
        if (poll(&stop, 1, 20) > 0) return false;
        continue;
      }
      return r->status / 100 == 2;
    }
  }

  const std::string path_;
  bool forward_stdin_;
  const int winch_fd_, stop_fd_;
  client::HttpClient client_;
};

}  // namespace

int ExecOnTerminal(const std::string& id, const ExecFlags& f, nlohmann::json req) {
  const TermSize size =
      TerminalSizeOf(STDOUT_FILENO).value_or(TerminalSizeOf(STDIN_FILENO).value_or(TermSize{}));
  req["tty"] = true;
  // Programs draw for the terminal the person has, as ssh and docker tell them.
  if (const char* term = getenv("TERM");
      term && *term && !(req.contains("env") && req["env"].contains("TERM")))
    req["env"]["TERM"] = term;
  req["rows"] = size.rows;
  req["cols"] = size.cols;
  req.erase("binary");  // a terminal's output is always exact
  // SIGWINCH only through the pump's signalfd: blocked before its thread starts, so that no
  // thread takes it the default way.
  sigset_t winch;
  sigemptyset(&winch);
  sigaddset(&winch, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &winch, nullptr);
  UniqueFd winch_fd(signalfd(-1, &winch, SFD_CLOEXEC | SFD_NONBLOCK));
  int stop[2];
  if (!winch_fd || pipe2(stop, O_CLOEXEC) != 0)
    return Fail(ErrnoStatus("set up the terminal", "exec -t"));
  UniqueFd stop_r(stop[0]), stop_w(stop[1]);

  auto r = Client().Request("POST", "/v1/sandboxes/" + client::UrlEncode(id) + "/exec", req.dump());
  if (!r.ok()) return Fail(r.status());
  auto started = client::JsonOf(*r, "exec in " + id);
  if (!started.ok()) return Fail(started.status());
  const std::string exec_id = (*started).value("exec_id", "");
  Result<nlohmann::json> result = Status::Ok();
  {
    // Raw only with -i: without it our keys stay ours (^C ends this client, not the command).
    std::optional<RawTerminal> raw;
    if (f.stdin_from_terminal) raw.emplace(STDIN_FILENO);
    InputPump pump("/v1/sandboxes/" + client::UrlEncode(id) + "/execs/" + exec_id,
                   f.stdin_from_terminal, winch_fd.get(), stop_r.get());
    std::thread pump_thread([&pump] { pump.Run(); });
    result = StreamExecOutput(id, exec_id);
    (void)!write(stop_w.get(), "x", 1);
    pump_thread.join();
  }  // the terminal is ours again before any message below
  if (!result.ok()) return Fail(result.status());
  return ExitCodeOf(id, *result);
}

}  // namespace warren::cli
