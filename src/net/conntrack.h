// Cutting connections a policy change no longer allows: their conntrack entries are deleted
// (libnetfilter_conntrack), so the firewall sees their next packet as new and refuses it.
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"
#include "net/policy.h"

namespace warren::net {

// For each IPv4 TCP/UDP connection from `src` (network byte order), asks `keep(dst, dport,
// proto)` and deletes the entry when it says no. Returns how many were deleted.
Result<int> DeleteConnections(uint32_t src,
                              const std::function<bool(uint32_t, uint16_t, Proto)>& keep);

}  // namespace warren::net
