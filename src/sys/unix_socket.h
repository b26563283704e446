// Unix socket addresses and the two ends the node uses on the host (listening, connecting),
// as calls returning Status.
#pragma once

#include <sys/un.h>

#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::sys {

Result<sockaddr_un> UnixAddr(const std::string& path);
// A listening SOCK_STREAM or SOCK_SEQPACKET socket at `path` (an old socket file is replaced).
Result<UniqueFd> ListenUnix(const std::string& path, int type, int backlog = 4);
Result<UniqueFd> ConnectUnix(const std::string& path, int type);

}  // namespace warren::sys
