// Cutting connections a policy change no longer allows: their conntrack entries are deleted
// (libnetfilter_conntrack), so the firewall sees their next packet as new and refuses it.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "net/remote_end.h"

namespace warren::net {

// For each TCP/UDP connection from the sandbox at `src` (its IPv4 address, network byte
// order; its IPv6 one is SandboxAddress6 of it), asks `keep` and deletes the entry when it
// says no. Returns how many were deleted.
Result<int> DeleteConnections(uint32_t src, const KeepConnection& keep);

}  // namespace warren::net
