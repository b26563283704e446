#include "sys/fd_passing.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace warren::sys {

static constexpr size_t kMaxFds = 64;

Status SendWithFds(int sock, const std::string& data, const std::vector<int>& fds) {
  if (fds.size() > kMaxFds) return Invalid("too many fds to send");
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return Status::Ok();
    if (errno != EINTR) return ErrnoStatus("sendmsg", "agent socket");
  }
}

Status RecvWithFds(int sock, size_t max, std::string* data, std::vector<UniqueFd>* fds) {
  // A packet socket tells the length of its next message: a large buffer (the agent's setup
  // takes up to 68 KiB) is made that size, not `max`, which zero-filled 17 pages (~40 us each
  // to fault in on this kind of guest) for a message of a few KiB in every sandbox made. A
  // buffer of a page or less is not worth the extra system call.
  size_t size = max;
  if (max > 4096) {
    ssize_t len;
    do {
      len = recv(sock, nullptr, 0, MSG_PEEK | MSG_TRUNC);
    } while (len < 0 && errno == EINTR);
    if (len >= 0) size = std::min(static_cast<size_t>(len), max);
  }
  data->resize(size);
  iovec iov{data->data(), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof cbuf;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("recvmsg", "agent socket");
  data->resize(static_cast<size_t>(n));
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(fd);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return Invalid("message truncated", "agent socket");
  return Status::Ok();
}

}  // namespace warren::sys
