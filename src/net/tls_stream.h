// TLS over a non-blocking socket (not owned) with a deadline on every wait, for the egress
// proxy's HTTPS package cache: the sandbox's side (we serve a leaf of the node CA) and the
// upstream side (we verify the real server like any client would).
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "base/status.h"
#include "net/fd_stream.h"

namespace warren::net {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;

// A server context for the sandbox side: TLS 1.2 and up, HTTP/1.1 by ALPN, no session cache.
Result<SslCtxPtr> NewServerTlsContext();
// A client context for upstreams: verifies against `ca_file` (empty: the system's store).
Result<SslCtxPtr> NewClientTlsContext(const std::string& ca_file);

class TlsStream : public ByteStream {
 public:
  ~TlsStream() override;

  // The server side of a handshake on `fd`, presenting `cert` and `key`; `sni` gets the name
  // the client asked for (empty if none).
  // The handshake must be over within `handshake_ms`.
  static Result<std::unique_ptr<TlsStream>> Accept(int fd, SSL_CTX* ctx, X509* cert, EVP_PKEY* key,
                                                   int handshake_ms, int timeout_ms,
                                                   std::string* sni);
  // The client side to `host`, whose certificate must verify for that name.
  static Result<std::unique_ptr<TlsStream>> Connect(int fd, SSL_CTX* ctx, const std::string& host,
                                                    int timeout_ms);

  int fd() const override { return fd_; }
  size_t ReadSome(void* data, size_t size, boost::system::error_code& ec) override;
  size_t WriteSome(const iovec* iov, int iovcnt, boost::system::error_code& ec) override;
  // Records that carry no data (TLS 1.3 session tickets arrive after the handshake) are
  // consumed: only data, a close or an error make a kept connection stale.
  bool Stale() override;

 private:
  TlsStream(SSL* ssl, int fd, int timeout_ms) : ssl_(ssl), fd_(fd), timeout_ms_(timeout_ms) {}
  // After an SSL call returned `r`: waits as OpenSSL asks (true: call again) or sets `ec`.
  bool Retry(int r, boost::system::error_code& ec);
  Status Handshake(const std::string& what, int deadline_ms);

  SSL* ssl_;
  int fd_;
  int timeout_ms_;
};

}  // namespace warren::net
