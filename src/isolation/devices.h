// A minimal /dev: null, zero, full, random, urandom, tty bind-mounted from the host, a
// private devpts instance, /dev/shm. No other device node is reachable. Child half.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

Status MountMinimalDev(const std::string& root);

}  // namespace warren::isolation
