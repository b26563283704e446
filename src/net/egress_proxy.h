// The node's HTTP/HTTPS egress proxy for sandboxes, on the bridge address (sandboxes find it
// through http_proxy & co, set in every exec, and apt's configuration). It enforces the
// same policy as the firewall and the resolver, by the connecting sandbox's address:
//   CONNECT host:port   - host and port must be allowed; the tunnel's TLS ClientHello must
//                         name the same host (or another allowed one): no domain fronting;
//   GET http://host/... - host (and the Host header, which must agree) must be allowed;
//                         package downloads and registry metadata are served from and
//                         stored in the shared PackageCache (net/cache_policy.h says what
//                         and for how long), concurrent misses collapsed into one fetch
//                         (net/fetch_flights.h).
// Destinations on the host itself, loopback, link-local (metadata) and the sandbox subnet
// are refused whatever a name resolves to. A policy change cuts the sandbox's connections
// it no longer allows. Bytes are counted per sandbox and by source (upstream or cache).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "net/address_ranges.h"
#include "net/cache_policy.h"
#include "net/fetch_flights.h"
#include "net/mirror_peers.h"
#include "net/node_ca.h"
#include "net/package_cache.h"
#include "net/policy.h"
#include "net/tls_stream.h"

namespace warren::net {

class Network;
class Resolver;
struct Upstream;  // egress_proxy.cc: a connection to a registry or a peer

struct ProxyOptions {
  uint32_t addr = 0;  // network byte order
  uint16_t port = 3128;
  uint32_t subnet = 0;  // the sandbox subnet, never a destination
  int prefix = 16;
  std::string cache_dir;
  uint64_t cache_bytes = 10ull << 30;
  size_t max_connections = 1024;
  size_t max_per_sandbox = 128;
  uint64_t cache_entry_bytes = 2ull << 30;  // larger downloads pass through unstored
  FreshnessWindows fresh;                   // how long registry metadata serves unasked
  // HTTPS package hosts whose downloads are cached (net/node_ca.h): CONNECTs to port 443 of
  // these are answered with a certificate of the node CA kept in `ca_dir`, and the upstream
  // is verified against `upstream_ca` (empty: the system's store). Empty list: none.
  std::vector<std::string> intercept;
  std::string ca_dir;
  std::string upstream_ca;
};

class EgressProxy {
 public:
  static Result<std::unique_ptr<EgressProxy>> Start(const ProxyOptions& opts, Network* net,
                                                    Resolver* resolver);
  ~EgressProxy();
  // After the policy of the sandbox at `src` changed: cut what it no longer allows.
  void Recheck(uint32_t src);
  // A deleted sandbox's counters go.
  void Forget(const std::string& id);
  // In a cluster: serves the package mirror's peers (other nodes' proxies asking for keys
  // this node owns, with `peers`' credential) on HOST:PORT (0: any free port), and asks
  // `peers` who owns what this node misses (net/mirror_peers.h). `peers` outlives the proxy.
  Status ServePeers(const std::string& host, uint16_t port, const MirrorPeers* peers);
  uint16_t peer_port() const { return peer_port_; }
  nlohmann::json Stats();
  // The node CA's certificate (PEM) sandboxes trust; empty when nothing is intercepted.
  std::string ca_pem() const { return ca_ ? ca_->cert_pem() : std::string(); }
  bool has_ca() const { return ca_ != nullptr; }

  struct Conn;

 private:
  EgressProxy(const ProxyOptions& opts, Network* net, Resolver* resolver)
      : opts_(opts),
        net_(net),
        resolver_(resolver),
        cache_(opts.cache_dir, opts.cache_bytes),
        intercept_(opts.intercept) {}
  // Accepts on `listener` until the proxy stops: sandboxes' connections, or peers'.
  void Accept(int listener, bool peers);
  void Work();  // a worker thread: serves accepted connections one after another
  void Serve(Conn* c);
  friend struct ProxySession;
  Result<UniqueFd> Connect(const std::string& host, uint16_t port, const Policy& policy);
  // A connection to a peer's listener (an address from the cluster's directory, not from a
  // tenant: none of a sandbox's destination rules apply).
  bool ConnectPeer(const std::string& address, Upstream* up);
  // Never reached whatever the rules say: the node itself, loopback, link-local, multicast,
  // the sandbox network; for IPv6 also an address standing for a forbidden IPv4 one.
  bool Forbidden(uint32_t addr);
  bool Forbidden6(const Ip6& addr);
  void RefreshLocalAddresses();  // under mu_
  void Count(Conn* c, uint64_t upstream, uint64_t cached);
  // Whether a CONNECT to host:port is answered with our certificate (see ProxyOptions).
  bool Intercepts(const std::string& host, uint16_t port) const;
  void CountIntercepted();
  // Whether the sandbox behind `c` may reach host:port now; its policy in `policy`.
  bool Allowed(Conn* c, const std::string& host, uint16_t port, std::string* why,
               Policy* policy = nullptr);
  // Whether a stored answer serves without asking upstream: immutable, or metadata within
  // its registry's freshness window.
  bool Current(const CacheEntry& e) const;
  // Whether current metadata is in the last quarter of its window: revalidated ahead.
  bool RevalidateAhead(const CacheEntry& e) const;

  // What the cache did for each registry's requests (Stats, /metrics).
  enum class CacheEvent { kHit, kRevalidated, kMiss, kChanged, kCollapsed, kPeer };
  struct RegistryCounters {
    std::atomic<uint64_t> hit{0}, revalidated{0}, miss{0}, changed{0}, collapsed{0}, peer{0};
    std::atomic<uint64_t> upstream_bytes{0}, cache_bytes{0}, peer_bytes{0};
  };
  void CountCache(Registry r, CacheEvent e);
  RegistryCounters& counters(Registry r) { return registries_[static_cast<size_t>(r)]; }

  ProxyOptions opts_;
  Network* net_;
  Resolver* resolver_;
  PackageCache cache_;
  FetchFlights flights_;
  std::array<RegistryCounters, std::size(kAllRegistries)> registries_;
  InterceptList intercept_;
  std::unique_ptr<NodeCa> ca_;
  SslCtxPtr server_ctx_, client_ctx_;
  UniqueFd listener_, wake_;
  std::thread acceptor_;
  UniqueFd peer_listener_;
  std::thread peer_acceptor_;
  uint16_t peer_port_ = 0;
  std::atomic<const MirrorPeers*> peers_{nullptr};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<Conn*> conns_;
  std::deque<Conn*> pending_;  // accepted, waiting for a worker
  std::condition_variable work_cv_;
  size_t workers_ = 0, idle_workers_ = 0;
  std::map<uint32_t, size_t> per_sandbox_;
  struct Bytes {
    uint64_t upstream = 0, cache = 0, connections = 0, refused = 0;
  };
  std::map<std::string, Bytes> by_sandbox_;  // sandbox id -> counters
  Bytes total_;
  uint64_t total_intercepted_ = 0;
  std::set<uint32_t> local_addrs_;
  std::set<Ip6> local_addrs6_;
  int64_t local_addrs_at_ = 0;
};

}  // namespace warren::net
