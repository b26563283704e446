// The host half of a container sandbox's filesystem integrity: its filesystem policy
// (isolation/fs_policy.h) applied while it runs, and the report of what its occupant changed
// (isolation/overlay_changes.h).
//
// Applying a policy (isolation/fs_apply.h) needs the host's CAP_LINUX_IMMUTABLE, which no
// container has, so the node does it, reaching the sandbox's writable layer through the fds its
// agent keeps (agent::kStagingDirFd), and runs the steps that must happen inside the sandbox
// (isolation/fs_prepare.h) in the fs helper (agent/fs_helper.h), which joins the sandbox's
// namespaces as its root. What the layers hold is read-only already (EROFS); what is only in a
// layer cannot be copied up into a flagged directory, so it cannot be changed either.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/status.h"
#include "isolation/fs_apply.h"
#include "isolation/layer_tree.h"
#include "isolation/overlay_changes.h"

namespace warren::runtime {

// `agent_pid`: the sandbox's agent (host pid); `agent_exe`: an fd of the warren-agent binary
// (run as the fs helper). The caller has frozen the sandbox and holds it alive.
// `agent_pidfd`: its pidfd, which the helper joins the namespaces through (no pid to reuse).
Result<isolation::FsPolicyStats> ApplyFsPolicy(pid_t agent_pid, int agent_pidfd, int agent_exe,
                                               const isolation::FsPolicy& policy);

Result<isolation::ChangeReport> ReadFsChanges(pid_t agent_pid, const std::string& under,
                                              size_t limit);

// A snapshot's tree (Instance::WriteSnapshotTree) into `dst_dirfd`: the agent's top kept
// layer when `with_top_layer`, then its writable layer, ids shifted back by `opts.id_base`
// (both are seen through the sandbox's id mapping). The caller has frozen the sandbox.
Status WriteSnapshotTree(pid_t agent_pid, int dst_dirfd, bool with_top_layer,
                         const isolation::LayerTreeOptions& opts, isolation::LayerTreeStats* stats);

}  // namespace warren::runtime
