// Cutting a sandbox's own end of connections its new policy no longer allows: from inside its
// network namespace the node asks the kernel to destroy those sockets (sock_diag
// SOCK_DESTROY), so a command blocked in recv() on one learns at once (ECONNABORTED) rather
// than when it next sends or times out.
#pragma once

#include "base/status.h"
#include "net/remote_end.h"

namespace warren::net {

// In the calling thread's network namespace: every TCP and connected UDP socket, IPv4 or
// IPv6, whose remote end `keep` rejects is destroyed (an IPv6 socket connected to a
// v4-mapped address is asked about as IPv4, the family it really uses); loopback and
// sockets to the namespace's own addresses are left alone. Returns how many were destroyed.
Result<int> DestroySockets(const KeepConnection& keep);

}  // namespace warren::net
