// HttpClient::Abort against a loopback peer that answers every request with a fixed reply
// (or, for the stream, with headers and then silence): an abort before or while connecting
// fails that one attempt and the client then works again; an abort mid-stream ends it.
#include "client/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace warren::client {
namespace {

using namespace std::chrono_literals;

// Accepts connections on 127.0.0.1 and answers each request on them: /stream with the head
// of a chunked reply that never ends, anything else with 200 "ok".
class LoopbackPeer {
 public:
  LoopbackPeer() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return;
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~LoopbackPeer() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : servers_) t.join();
    for (int fd : conns_) ::close(fd);
    ::close(listen_fd_);
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }

 private:
  void AcceptLoop() {
    while (!stopping_) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      conns_.push_back(fd);
      servers_.emplace_back([this, fd] { Serve(fd); });
    }
  }
  void Serve(int fd) {
    std::string in;
    char buf[4096];
    for (;;) {
      const size_t end = in.find("\r\n\r\n");
      if (end == std::string::npos) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
        continue;
      }
      const bool stream = in.rfind("GET /stream", 0) == 0;
      in.erase(0, end + 4);
      ++requests_;
      const std::string reply = stream ? "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                                         "Transfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n"
                                       : "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
      if (::write(fd, reply.data(), reply.size()) != static_cast<ssize_t>(reply.size())) return;
    }
  }

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::thread acceptor_;
  std::vector<int> conns_;  // touched by the acceptor only until it is joined
  std::vector<std::thread> servers_;
};

TEST(HttpClientAbort, BeforeConnectingFailsThatAttemptAndTheNextOneConnects) {
  LoopbackPeer peer;
  HttpClient client(peer.Url(), "");
  client.Abort();  // nothing connected: the next connection attempt gives up
  auto aborted = client.Request("GET", "/x");
  ASSERT_FALSE(aborted.ok());
  EXPECT_EQ(aborted.status().code(), Code::kUnavailable);
  EXPECT_NE(aborted.status().ToString().find("aborted"), std::string::npos)
      << aborted.status().ToString();

  auto again = client.Request("GET", "/x");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(again->body, "ok");
  EXPECT_EQ(peer.requests(), 1);
}

TEST(HttpClientAbort, AStreamInProgressEndsUnavailable) {
  LoopbackPeer peer;
  HttpClient client(peer.Url(), "");
  std::atomic<int> lines{0};
  std::thread reader([&] {
    Status st = client.StreamLines("/stream", [&](std::string_view) { ++lines; });
    EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  });
  // The stream is connected once its first line arrived; then the peer goes silent.
  for (int i = 0; i < 500 && lines == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(lines, 1);
  client.Abort();
  reader.join();

  auto after = client.Request("GET", "/x");  // a fresh connection
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->body, "ok");
}

}  // namespace
}  // namespace warren::client
