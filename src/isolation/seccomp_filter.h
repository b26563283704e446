// Seccomp, child half: installs a compiled BPF program (from the node) on the calling
// process. Requires no_new_privs. Everything the process starts afterwards inherits it.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

Status InstallSeccompFilter(const std::string& bpf);

}  // namespace warren::isolation
