// Blocking-with-deadline byte streams for Boost.Beast's synchronous HTTP reads and writes
// (the SyncReadStream / SyncWriteStream concepts): every wait has a timeout, which Asio's own
// synchronous sockets do not offer. The egress proxy runs one thread per client connection on
// these: ByteStream is what its HTTP code sees, FdStream a plain non-blocking socket under
// it, TlsStream (net/tls_stream.h) TLS over one.
#pragma once

#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/system/error_code.hpp>
#include <functional>

namespace warren::net {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual int fd() const = 0;
  // Some bytes into `data` (0 and ec set at the end or on error or timeout).
  virtual size_t ReadSome(void* data, size_t size, boost::system::error_code& ec) = 0;
  virtual size_t WriteSome(const iovec* iov, int iovcnt, boost::system::error_code& ec) = 0;
  // `size` bytes of the file `file_fd` from `from`; `count` hears of each piece sent.
  virtual bool SendFile(int file_fd, uint64_t from, uint64_t size,
                        const std::function<void(uint64_t)>& count) {
    char tmp[65536];
    for (uint64_t off = from, end = from + size; off < end;) {
      ssize_t n =
          pread(file_fd, tmp, std::min<uint64_t>(sizeof tmp, end - off), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !WriteAll(tmp, static_cast<size_t>(n))) return false;
      off += static_cast<uint64_t>(n);
      count(static_cast<uint64_t>(n));
    }
    return true;
  }
  uint64_t bytes_in() const { return in_; }
  uint64_t bytes_out() const { return out_; }
  // Between requests on a kept connection: whether the peer closed it or sent something
  // unasked (either way the next response could not be told apart): then it is not reused.
  virtual bool Stale() = 0;

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      return ReadSome(b.data(), b.size(), ec);
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
    return WriteSome(iov, n, ec);
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
      iovec iov{const_cast<char*>(data), size};
      size_t n = WriteSome(&iov, 1, ec);
      if (ec) return false;
      data += n, size -= n;
    }
    return true;
  }

 protected:
  // Waits for `events` on `fd` for at most `timeout_ms`; false (and ec set) on timeout.
  static bool WaitFd(int fd, short events, int timeout_ms, boost::system::error_code& ec) {
    pollfd p{fd, events, 0};
    for (;;) {
      int r = poll(&p, 1, timeout_ms);
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

  uint64_t in_ = 0, out_ = 0;
};

// A plain non-blocking socket, not owned.
class FdStream : public ByteStream {
 public:
  FdStream(int fd, int timeout_ms) : fd_(fd), timeout_ms_(timeout_ms) {}
  int fd() const override { return fd_; }

  size_t ReadSome(void* data, size_t size, boost::system::error_code& ec) override {
    for (;;) {
      ssize_t n = recv(fd_, data, size, 0);
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

  size_t WriteSome(const iovec* iov, int iovcnt, boost::system::error_code& ec) override {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
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

  // The kernel copies the file to the socket: no pass through our memory.
  bool SendFile(int file_fd, uint64_t from, uint64_t size,
                const std::function<void(uint64_t)>& count) override {
    off_t off = static_cast<off_t>(from);
    const uint64_t end = from + size;
    boost::system::error_code ec;
    while (static_cast<uint64_t>(off) < end) {
      ssize_t n = sendfile(fd_, file_fd, &off, end - static_cast<uint64_t>(off));
      if (n > 0) {
        out_ += static_cast<uint64_t>(n);
        count(static_cast<uint64_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && Wait(POLLOUT, ec)) continue;
      return false;
    }
    return true;
  }

  bool Wait(short events, boost::system::error_code& ec) {
    return WaitFd(fd_, events, timeout_ms_, ec);
  }

  bool Stale() override {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, 0) != 0;
  }

 private:
  int fd_;
  int timeout_ms_;
};

}  // namespace warren::net
