// The warren-agent executable as a sealed memfd.
//
// Sandboxes execute the agent from this memfd, not from a path: nothing in any rootfs can
// be overwritten to hijack it, and /proc/1/exe inside a sandbox points at a sealed,
// unwritable memory file rather than a host binary (the CVE-2019-5736 class).
#pragma once

#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::runtime {

// Copies `path` into a memfd and seals it against writes, growth and shrinking.
Result<UniqueFd> LoadSealedAgent(const std::string& path);

// The agent next to the running executable (DIR/warren-agent), or $WARREN_AGENT.
std::string DefaultAgentPath();

// warren-zygote.so (the fncall zygote, see runtime/fncall/zygote_lib.c): $WARREN_ZYGOTE_LIB,
// else next to the running executable, as the agent.
std::string DefaultZygoteLibPath();

}  // namespace warren::runtime
