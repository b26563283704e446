// Landlock, child half: one domain over the whole sandbox (the agent enters it after setup
// and every command inherits it). File access is limited to the sandbox's own tree, device
// nodes cannot be created, device ioctls only under /dev, and — ABI 6 and later — abstract
// UNIX sockets and signals cannot cross the sandbox's boundary. Works for euid 0.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace warren::isolation {

// The kernel's Landlock ABI version, 0 when Landlock is unavailable.
int LandlockAbi();

// Restricts the calling process (needs no_new_privs). With `required` false, a kernel without
// Landlock is not an error (the other layers still hold); the returned ABI says what applied.
Result<int> ApplyLandlock(bool required);

// An fncall call's rules are isolation/call_setup.c's (C, shared with warren-zygote.so).

}  // namespace warren::isolation
