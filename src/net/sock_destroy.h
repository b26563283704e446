// Cutting a sandbox's own end of connections its new policy no longer allows: from inside its
// network namespace the node asks the kernel to destroy those sockets (sock_diag
// SOCK_DESTROY), so a command blocked in recv() on one learns at once (ECONNABORTED) rather
// than when it next sends or times out.
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"
#include "net/policy.h"

namespace warren::net {

// In the calling thread's network namespace: every IPv4 TCP and connected UDP socket whose
// remote end (address, port, protocol) `keep` rejects is destroyed; loopback and sockets to
// the namespace's own addresses are left alone. Returns how many were destroyed.
Result<int> DestroySockets(const std::function<bool(uint32_t, uint16_t, Proto)>& keep);

}  // namespace warren::net
