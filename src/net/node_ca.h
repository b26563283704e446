// The node's certificate authority for the egress proxy's package cache over HTTPS. To cache
// what pip and npm fetch over TLS (wheels from files.pythonhosted.org, tarballs from
// registry.npmjs.org), the proxy terminates the sandbox's TLS for a short list of package
// hosts, with a certificate this CA issues on the spot, and opens its own verified TLS
// connection upstream. Sandboxes trust the CA (files and variables the node puts in egress
// sandboxes, docs/design.md "HTTPS package cache"); nothing else does.
//
// The CA's certificate carries X.509 name constraints: it can vouch only for the hosts the
// proxy intercepts (and names under them) and for no IP address, so even its key in the
// wrong hands could not impersonate any other site to a sandbox whose TLS library applies
// constraints of trust anchors (OpenSSL, GnuTLS, Go and Node.js do). Its key (EC P-256) stays in
// DIR/ca.key, mode 0600, and outlives restarts (a running sandbox keeps trusting it); the
// certificate is issued again from the same key and subject when the host list changes. Leaf
// certificates (one key per daemon, 7 days) are made per host on first use and kept in memory.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::net {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// The hosts whose HTTPS is intercepted: exact names, or `*.domain` for any name under it.
class InterceptList {
 public:
  explicit InterceptList(std::vector<std::string> hosts);
  bool Matches(const std::string& host) const;  // `host` lowercase, no trailing dot
  bool empty() const { return hosts_.empty(); }
  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  std::vector<std::string> hosts_;  // lowercase, no trailing dot
};

class NodeCa {
 public:
  // Loads the CA from `dir` (made if missing), for the hosts in `list`.
  static Result<std::unique_ptr<NodeCa>> Open(const std::string& dir, const InterceptList& list);

  const std::string& cert_pem() const { return cert_pem_; }
  X509* cert() const { return cert_.get(); }

  // A certificate for `host` (which the list matches) and the key that goes with it.
  Result<std::pair<std::shared_ptr<X509>, EVP_PKEY*>> Leaf(const std::string& host);

 private:
  NodeCa() = default;

  PkeyPtr key_, leaf_key_;
  X509Ptr cert_;
  std::string cert_pem_;
  std::mutex mu_;
  struct Issued {
    std::shared_ptr<X509> cert;
    int64_t renew_at = 0;  // unix seconds
  };
  std::map<std::string, Issued> leaves_;
};

// OpenSSL's error queue as text (and cleared), for messages.
std::string OpenSslError();

}  // namespace warren::net
