#include "net/tls_stream.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <cstring>

#include "net/node_ca.h"

namespace warren::net {

namespace {

constexpr unsigned char kAlpnHttp11[] = "\x08http/1.1";

int SelectHttp11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                 unsigned inlen, void*) {
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, kAlpnHttp11, sizeof kAlpnHttp11 - 1, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;  // no HTTP/1.1 offered: go on without ALPN, the client decides
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

Result<SslCtxPtr> NewServerTlsContext() {
  SslCtxPtr c(SSL_CTX_new(TLS_server_method()));
  if (!c) return Internal("TLS server context", "egress proxy", OpenSslError());
  SSL_CTX_set_min_proto_version(c.get(), TLS1_2_VERSION);
  // No resumption: every connection is a fresh handshake against the leaf its CONNECT names.
  SSL_CTX_set_session_cache_mode(c.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(c.get(),
                      SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(c.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_alpn_select_cb(c.get(), SelectHttp11, nullptr);
  return c;
}

Result<SslCtxPtr> NewClientTlsContext(const std::string& ca_file) {
  SslCtxPtr c(SSL_CTX_new(TLS_client_method()));
  if (!c) return Internal("TLS client context", "egress proxy", OpenSslError());
  SSL_CTX_set_min_proto_version(c.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(c.get(), SSL_VERIFY_PEER, nullptr);
  const bool loaded = ca_file.empty()
                          ? SSL_CTX_set_default_verify_paths(c.get()) == 1
                          : SSL_CTX_load_verify_locations(c.get(), ca_file.c_str(), nullptr) == 1;
  if (!loaded)
    return Internal("load trusted CAs", ca_file.empty() ? "system store" : ca_file, OpenSslError());
  // No SSL_OP_IGNORE_UNEXPECTED_EOF upstream: a body cut by a bare FIN is an error, not an
  // end (it must not reach a client, or the cache, as complete).
  SSL_CTX_set_options(c.get(), SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(c.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_set_alpn_protos(c.get(), kAlpnHttp11, sizeof kAlpnHttp11 - 1) != 0)
    return Internal("TLS client context", "ALPN", OpenSslError());
  return c;
}

TlsStream::~TlsStream() {
  SSL_shutdown(ssl_);  // one try at a close_notify; the socket is closed by its owner anyway
  SSL_free(ssl_);
  ERR_clear_error();
}

bool TlsStream::Retry(int r, boost::system::error_code& ec) {
  switch (SSL_get_error(ssl_, r)) {
    case SSL_ERROR_WANT_READ:
      return WaitFd(fd_, POLLIN, timeout_ms_, ec);
    case SSL_ERROR_WANT_WRITE:
      return WaitFd(fd_, POLLOUT, timeout_ms_, ec);
    case SSL_ERROR_ZERO_RETURN:
      ec = boost::asio::error::eof;
      return false;
    case SSL_ERROR_SYSCALL:  // the socket is non-blocking: no EINTR here, always an end
      ec.assign(errno ? errno : ECONNRESET, boost::system::system_category());
      ERR_clear_error();
      return false;
    default:
      ec = boost::asio::error::connection_aborted;
      ERR_clear_error();
      return false;
  }
}

Status TlsStream::Handshake(const std::string& what, int deadline_ms) {
  const int keep = timeout_ms_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
  for (;;) {
    ERR_clear_error();
    int r = SSL_do_handshake(ssl_);
    if (r == 1) {
      timeout_ms_ = keep;
      return Status::Ok();
    }
    const int err = SSL_get_error(ssl_, r);
    boost::system::error_code ec;
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      // Every wait only as long as the whole handshake has left.
      timeout_ms_ = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                   std::chrono::steady_clock::now())
                 .count()));
      if (timeout_ms_ > 0 && Retry(r, ec)) continue;
      return Status(Code::kUnavailable, "TLS handshake", what,
                    timeout_ms_ > 0 ? ec.message() : "timed out");
    }
    if (long v = SSL_get_verify_result(ssl_); v != X509_V_OK)
      return Status(Code::kUnavailable, "TLS handshake", what,
                    std::string("certificate verify failed: ") + X509_verify_cert_error_string(v));
    if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN)
      return Status(Code::kUnavailable, "TLS handshake", what,
                    errno ? strerror(errno) : "connection closed");
    return Status(Code::kUnavailable, "TLS handshake", what, OpenSslError());
  }
}

Result<std::unique_ptr<TlsStream>> TlsStream::Accept(int fd, SSL_CTX* ctx, X509* cert,
                                                     EVP_PKEY* key, int handshake_ms,
                                                     int timeout_ms, std::string* sni) {
  SSL* ssl = SSL_new(ctx);
  if (!ssl) return Internal("TLS accept", "egress proxy", OpenSslError());
  std::unique_ptr<TlsStream> s(new TlsStream(ssl, fd, timeout_ms));
  if (SSL_use_certificate(ssl, cert) != 1 || SSL_use_PrivateKey(ssl, key) != 1 ||
      SSL_set_fd(ssl, fd) != 1)
    return Internal("TLS accept", "egress proxy", OpenSslError());
  SSL_set_accept_state(ssl);
  WARREN_RETURN_IF_ERROR(s->Handshake("with the sandbox", handshake_ms));
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  *sni = name ? name : "";
  return s;
}

Result<std::unique_ptr<TlsStream>> TlsStream::Connect(int fd, SSL_CTX* ctx, const std::string& host,
                                                      int timeout_ms) {
  SSL* ssl = SSL_new(ctx);
  if (!ssl) return Internal("TLS connect", host, OpenSslError());
  std::unique_ptr<TlsStream> s(new TlsStream(ssl, fd, timeout_ms));
  if (SSL_set_fd(ssl, fd) != 1 || SSL_set_tlsext_host_name(ssl, host.c_str()) != 1 ||
      SSL_set1_host(ssl, host.c_str()) != 1)
    return Internal("TLS connect", host, OpenSslError());
  SSL_set_connect_state(ssl);
  WARREN_RETURN_IF_ERROR(s->Handshake("with " + host, timeout_ms));
  return s;
}

size_t TlsStream::ReadSome(void* data, size_t size, boost::system::error_code& ec) {
  for (;;) {
    size_t got = 0;
    ERR_clear_error();
    int r = SSL_read_ex(ssl_, data, size, &got);
    if (r == 1) {
      ec = {};
      in_ += got;
      return got;
    }
    if (!Retry(r, ec)) return 0;
  }
}

bool TlsStream::Stale() {
  for (;;) {
    if (SSL_has_pending(ssl_)) return true;  // bytes OpenSSL read ahead: data, or a record to parse
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) == 0) return false;
    char c;
    size_t got = 0;
    ERR_clear_error();
    if (SSL_peek_ex(ssl_, &c, 1, &got) == 1) return true;  // data nobody asked for
    const int err = SSL_get_error(ssl_, 0);
    ERR_clear_error();
    if (err != SSL_ERROR_WANT_READ) return true;  // closed, or broken
    // Only records without data (tickets) were there: look again.
  }
}

size_t TlsStream::WriteSome(const iovec* iov, int iovcnt, boost::system::error_code& ec) {
  // Small pieces (a serialized header, a chunk's framing) go out as one record.
  char joined[16384];
  const char* data = static_cast<const char*>(iov[0].iov_base);
  size_t size = iov[0].iov_len;
  if (iovcnt > 1 && size < sizeof joined) {
    size = 0;
    for (int i = 0; i < iovcnt && size < sizeof joined; ++i) {
      size_t n = std::min(iov[i].iov_len, sizeof joined - size);
      memcpy(joined + size, iov[i].iov_base, n);
      size += n;
    }
    data = joined;
  }
  for (;;) {
    size_t put = 0;
    ERR_clear_error();
    int r = SSL_write_ex(ssl_, data, size, &put);
    if (r == 1) {
      ec = {};
      out_ += put;
      return put;
    }
    if (!Retry(r, ec)) return 0;
  }
}

}  // namespace warren::net
