// The far end of a sandbox's connection, in either family: as what cuts connections after a
// policy change sees it (its own sockets, the host's connection tracking), and as the egress
// proxy connects to it.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "net/address_ranges.h"
#include "net/policy.h"

namespace warren::net {

struct RemoteEnd {
  int family = AF_INET;  // AF_INET or AF_INET6
  Ip6 addr{};            // AF_INET: the first 4 bytes (network byte order)
  uint16_t port = 0;
  Proto proto = Proto::kTcp;

  static RemoteEnd V4(uint32_t a, uint16_t port, Proto proto) {
    RemoteEnd r{AF_INET, {}, port, proto};
    memcpy(r.addr.data(), &a, 4);
    return r;
  }
  uint32_t v4() const {
    uint32_t a;
    memcpy(&a, addr.data(), 4);
    return a;
  }
  std::string AddressString() const;
  // The socket address to connect to; returns its length.
  socklen_t Fill(sockaddr_storage* ss) const;
};

// Whether a connection to `end` may stay.
using KeepConnection = std::function<bool(const RemoteEnd& end)>;

}  // namespace warren::net
