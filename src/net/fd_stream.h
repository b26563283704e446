// A blocking-with-deadline socket for Boost.Beast's synchronous HTTP reads and writes (the
// SyncReadStream / SyncWriteStream concepts) over a plain non-blocking fd: every wait has a
// timeout, which Asio's own synchronous sockets do not offer. The egress proxy runs one
// thread per client connection on these.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/system/error_code.hpp>

namespace warren::net {

class FdStream {
 public:
  FdStream(int fd, int timeout_ms) : fd_(fd), timeout_ms_(timeout_ms) {}
  int fd() const { return fd_; }
  uint64_t bytes_in() const { return in_; }
  uint64_t bytes_out() const { return out_; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      for (;;) {
        ssize_t n = recv(fd_, b.data(), b.size(), 0);
        if (n > 0) {
          ec = {};
          in_ += static_cast<uint64_t>(n);
          return static_cast<size_t>(n);
        }
        if (n == 0) {
          ec = boost::asio::error::eof;
          return 0;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN || !Wait(POLLIN, ec)) {
          if (!ec) ec.assign(errno, boost::system::system_category());
          return 0;
        }
      }
    }
    ec = {};
    return 0;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
    iovec iov[16];
    int n = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && n < 16; ++it) {
      boost::asio::const_buffer b = *it;
      if (b.size() == 0) continue;
      iov[n++] = iovec{const_cast<void*>(b.data()), b.size()};
    }
    if (n == 0) {
      ec = {};
      return 0;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    for (;;) {
      ssize_t w = sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (w >= 0) {
        ec = {};
        out_ += static_cast<uint64_t>(w);
        return static_cast<size_t>(w);
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN || !Wait(POLLOUT, ec)) {
        if (!ec) ec.assign(errno, boost::system::system_category());
        return 0;
      }
    }
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers) {
    boost::system::error_code ec;
    size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  // Writes all of `data`; false on error or timeout.
  bool WriteAll(const char* data, size_t size) {
    boost::system::error_code ec;
    while (size > 0) {
      size_t n = write_some(boost::asio::const_buffer(data, size), ec);
      if (ec) return false;
      data += n, size -= n;
    }
    return true;
  }

  // Waits for `events`; false (and ec set) on timeout.
  bool Wait(short events, boost::system::error_code& ec) {
    pollfd p{fd_, events, 0};
    for (;;) {
      int r = poll(&p, 1, timeout_ms_);
      if (r > 0) return true;
      if (r == 0) {
        ec = boost::beast::error::timeout;
        return false;
      }
      if (errno != EINTR) {
        ec.assign(errno, boost::system::system_category());
        return false;
      }
    }
  }

 private:
  int fd_;
  int timeout_ms_;
  uint64_t in_ = 0, out_ = 0;
};

}  // namespace warren::net
