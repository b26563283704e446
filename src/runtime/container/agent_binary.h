// The warren-agent executable, held by the node as an fd that every sandbox's first process
// executes (execveat), never by a path.
//
// Nothing in any rootfs can be overwritten to hijack it, and /proc/1/exe inside a sandbox
// names an unwritable file that no sandbox can reach by a path (the CVE-2019-5736 class).
// Where the node may mount, the file lives alone on a tmpfs of its own that is attached
// nowhere, holds its pages as 2 MiB huge pages, and is made read-only once filled: the agent
// is linked with its segments 2 MiB-aligned, so each new agent maps its code with one
// page-table entry per 2 MiB instead of faulting it in 64 KiB at a time (and tears down as
// few at its exit). Elsewhere it is a memfd sealed against writes. Under a sandbox's Landlock
// domain the file lies outside every tree it allows, so the sandbox's processes can neither
// read nor execute /proc/1/exe; the agent never executes itself again there (fncall runners,
// whose dispatcher is /proc/self/exe, have no sandbox-wide Landlock).
#pragma once

#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::runtime {

// The agent at `path`, as the node holds it: up to the end of its last loaded segment (the
// symbols and debug information after that are for tools, not for exec), on the huge-page
// tmpfs described above, else in a sealed memfd. `how`, if given, says which and why.
Result<UniqueFd> LoadAgent(const std::string& path, std::string* how = nullptr);

// The agent next to the running executable (DIR/warren-agent), or $WARREN_AGENT.
std::string DefaultAgentPath();

// warren-zygote.so (the fncall zygote, see runtime/fncall/zygote_lib.c): $WARREN_ZYGOTE_LIB,
// else next to the running executable, as the agent.
std::string DefaultZygoteLibPath();

}  // namespace warren::runtime
