// Sending and receiving file descriptors over a UNIX socket (SCM_RIGHTS).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::sys {

// Sends one message `data` carrying `fds` (at most 64).
Status SendWithFds(int sock, const std::string& data, const std::vector<int>& fds);
// Receives one message (up to `max` bytes) and the fds attached to it (made O_CLOEXEC).
Status RecvWithFds(int sock, size_t max, std::string* data, std::vector<UniqueFd>* fds);

}  // namespace warren::sys
