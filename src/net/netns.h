// Network namespaces made and entered by the node. A namespace the node makes is owned by
// the host's user namespace, so a sandbox root (root only in its own user namespace) holds no
// capability over it: it cannot change its addresses, routes, links or sysctls, nor open raw
// or packet sockets. The node works inside one only on a dedicated thread that returns to the
// host's namespace after every task (setns is per thread; no other thread ever leaves).
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::net {

// A new namespace with `lo` up; `inside` runs in it before it is returned. Calls from
// several threads are serialized; `inside` and `fn` must not call back into these.
Result<UniqueFd> CreateNetns(const std::function<Status()>& inside = nullptr);
// Runs `fn` inside the namespace `netns_fd` (on the dedicated thread; waits for it).
Status RunInNetns(int netns_fd, const std::function<Status()>& fn);
// Writes a sysctl of the calling thread's network namespace, e.g. "net/ipv4/ip_forward".
Status WriteNetSysctl(const std::string& key, const std::string& value);
// The host's (initial) network namespace as seen by this process.
Result<UniqueFd> OpenHostNetns();
// Whether the namespace `netns_fd` is owned by the host's user namespace and is not the
// host's own: one the node made, in which no sandbox holds a capability.
bool NodeOwnedNetns(int netns_fd);

}  // namespace warren::net
