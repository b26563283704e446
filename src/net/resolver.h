// Name resolution for the node's DNS server and egress proxy: names from an operator's hosts
// file first (`warren serve --dns-hosts`, /etc/hosts format), then upstream DNS through
// c-ares (the host's resolv.conf servers, or `--dns-upstream`), with answers cached for
// their TTL. Both families: the DNS server answers sandboxes' A questions from the IPv4
// addresses, and the egress proxy connects to either.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/address_ranges.h"

namespace warren::net {

struct Resolution {
  std::vector<uint32_t> addrs;  // IPv4, network byte order
  std::vector<Ip6> addrs6;      // IPv6
  uint32_t ttl_s = 0;
  bool trusted = false;  // from the operator's hosts file, not from DNS
};

class Resolver {
 public:
  // `hosts_file`: may be empty; `upstream`: "IP" or "IP:PORT", empty for resolv.conf's.
  static Result<std::unique_ptr<Resolver>> Create(const std::string& hosts_file,
                                                  const std::string& upstream);
  ~Resolver();
  // kNotFound if the name has no address; kUnavailable if upstream did not answer.
  Result<Resolution> Resolve(const std::string& name);

 private:
  Resolver() = default;
  Result<Resolution> Upstream(const std::string& name);

  std::string upstream_;
  std::map<std::string, Resolution> hosts_;
  std::mutex mu_;
  struct Cached {
    Resolution r;
    int64_t expiry_ms;
  };
  std::map<std::string, Cached> cache_;
};

}  // namespace warren::net
