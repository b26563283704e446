#include "node/agent_mux.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace warren::node {

AgentMux::AgentMux() = default;

AgentMux::~AgentMux() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  if (wake_) {
    uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
}

Status AgentMux::Start() {
  epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoStatus("epoll_create1", "agent mux");
  wake_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return ErrnoStatus("eventfd", "agent mux");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void AgentMux::Add(const std::shared_ptr<AgentConn>& conn) {
  MutexLock lock(&mu_);
  uint64_t key = next_key_++;
  conns_[key] = conn;
  keys_[conn.get()] = key;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key;  // keys are never reused, unlike fds
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, conn->fd(), &ev);
}

void AgentMux::Remove(const std::shared_ptr<AgentConn>& conn) {
  MutexLock lock(&mu_);
  auto it = keys_.find(conn.get());
  if (it == keys_.end()) return;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, conn->fd(), nullptr);
  conns_.erase(it->second);
  keys_.erase(it);
}

void AgentMux::Loop() {
  epoll_event evs[128];
  std::string buf(agent::kMaxMessage, '\0');
  for (;;) {
    int n = epoll_wait(epoll_.get(), evs, 128, -1);
    if (n < 0 && errno != EINTR) return;
    for (int i = 0; i < n; ++i) {
      uint64_t key = evs[i].data.u64;
      if (key == 0) {
        MutexLock lock(&mu_);
        if (stop_) return;
        continue;
      }
      std::shared_ptr<AgentConn> conn;
      {
        MutexLock lock(&mu_);
        auto it = conns_.find(key);
        if (it == conns_.end()) continue;
        conn = it->second;
      }
      // Drain a bounded number of messages per wakeup for fairness between sandboxes.
      for (int k = 0; k < 64; ++k) {
        ssize_t r = recv(conn->fd(), buf.data(), buf.size(), MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (r <= 0) {
          Remove(conn);
          conn->OnClosed(r == 0 ? "agent exited" : "agent socket error");
          if (on_closed_) on_closed_(conn->sandbox_id());
          break;
        }
        auto m = agent::Decode(std::string_view(buf.data(), static_cast<size_t>(r)));
        if (m.ok()) conn->OnMessage(*m);
      }
    }
  }
}

}  // namespace warren::node
