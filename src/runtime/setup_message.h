// What a backend tells a new sandbox's agent (agent/setup_messages.h), decided from the
// sandbox's config alone: kept apart from the create paths, which need a kernel or QEMU, so the
// decisions are unit-tested (tests/unit/setup_message_test.cc).
#pragma once

#include "agent/setup_messages.h"
#include "runtime/backend.h"

namespace warren::runtime {

struct SetupContext {
  bool hardened = true;          // the node installs seccomp and Landlock (not benchmark mode)
  bool commands_cgroup = false;  // a cgroup for the commands was made (fd slot)
};

// What every backend's setup says alike: hostname, disk size, layers (tool layers by
// position), files (mode 0644), the commands' open-file limit and environment.
agent::SetupMessage CommonSetup(const SandboxConfig& cfg);

// The container backend's setup message for `cfg`: its layers (tool layers by position), whether
// the agent brings up its own loopback (no namespace of the node's), files, limits, environment,
// Landlock (not for fncall runners, whose zygote makes each call's namespaces) and the fd slots it
// sends.
agent::SetupMessage ContainerSetupMessage(const SandboxConfig& cfg, const SetupContext& ctx);

}  // namespace warren::runtime
