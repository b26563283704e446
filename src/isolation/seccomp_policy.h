// Seccomp policy, parent half: policy/seccomp.json (reviewed data, compiled into the binary)
// -> a BPF program, once per daemon, with libseccomp. The agent installs the bytes (see
// seccomp_filter.h); it never parses policy itself.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

// The policy shipped in the binary (policy/seccomp.json at build time).
const std::string& BuiltinSeccompPolicy();
// The filter every fncall call adds on top of its runner's (policy/seccomp-call.json).
const std::string& CallSeccompPolicy();

// Profiles: a rule with "skip_in": [PROFILE] is left out when compiling for PROFILE.
// "fncall-runner" is the container policy for fncall runners, whose zygote mounts each
// call's /proc and /tmp before the call's own filter closes the mount API again.
inline constexpr const char* kRunnerProfile = "fncall-runner";

// Compiles a policy document to a classic-BPF program (struct sock_filter[] as raw bytes).
// Unknown syscall names are skipped (the policy is portable across kernels and arches);
// anything else malformed is an error naming the rule.
Result<std::string> CompileSeccompPolicy(const std::string& policy_json,
                                         const std::string& profile = "");

}  // namespace warren::isolation
