// User namespaces, parent half: the node writes the uid/gid maps of a sandbox's new user
// namespace from outside. Root inside maps to the first id of the sandbox's host range, so
// nothing in the sandbox is ever host uid 0.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::isolation {

struct IdRange {
  uint32_t host_base = 0;  // host uid/gid that root (0) inside maps to
  uint32_t count = 65536;
};

// Writes "0 host_base count" to /proc/PID/{uid_map,gid_map}. The node holds CAP_SETUID and
// CAP_SETGID in the parent namespace, so setgroups stays allowed inside (package managers
// need it) without the CVE-2014-8989 concern that forces unprivileged writers to deny it.
Status WriteIdMaps(pid_t pid, const IdRange& range);

// Opens /proc/PID/ns/user: the namespace whose mapping idmapped mounts use.
Result<UniqueFd> OpenUserNs(pid_t pid);

}  // namespace warren::isolation
