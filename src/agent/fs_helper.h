// `warren-agent --fs-helper FD`: the node's hands inside a container sandbox while it applies
// a filesystem policy (runtime/container/fs_guard.h). The node freezes the sandbox, starts
// this (as host root) with a pipe on stdin and stdout and the agent's pidfd at FD; it joins the
// mount and user namespaces of the sandbox's agent through it and becomes the sandbox's root
// there, unsealed (our own
// code, no occupant process runs meanwhile), and answers one request per line:
//
//   check {read_only, writable}    -> {} | {error}: every path resolves (nothing changes);
//   prepare {read_only, writable}  -> {read_only, writable, fixed_dirs} | {error}
//     resolves each path inside the sandbox (symlinks followed; a missing path is an error),
//     copies up through the overlay every directory the policy will flag (so the writable
//     layer holds it), pins the directories above each read-only tree (bind mounts: a mount
//     point cannot be renamed) and names the directories holding a symlink on the way to one
//     (`fixed_dirs`: their entries get fixed instead, a symlink cannot be flagged or pinned);
//   sever {paths}                  -> {} | {error}
//     replaces each file (open for writing somewhere, see isolation/write_leases.h) by a copy
//     of itself, renamed over it through the overlay: descriptors and mappings opened before
//     keep the old inode, which no name reaches any more.
//
// The overlay does the work with the sandbox's credentials, as for any of its own writes:
// the node, outside the sandbox's user namespace, could not create a file there.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "isolation/fs_prepare.h"
#include "isolation/overlay_changes.h"

namespace warren::agent {

inline constexpr const char* kFsHelperFlag = "--fs-helper";

using FsPrepareRequest = isolation::FsPolicy;
using FsPrepareReply = isolation::FsPrepared;
struct FsSeverRequest {
  std::vector<std::string> paths;
};

// One line each way; strict (an unknown or missing key is an error).
std::string EncodeFsPrepare(const FsPrepareRequest& r);
std::string EncodeFsCheck(const FsPrepareRequest& r);
std::string EncodeFsSever(const FsSeverRequest& r);
std::string EncodeFsPrepareReply(const FsPrepareReply& r);
std::string EncodeFsError(const Status& error);
std::string EncodeFsDone();
Result<FsPrepareReply> DecodeFsPrepareReply(const std::string& line);
Status DecodeFsDone(const std::string& line);

// The node <-> guest agent messages of a microVM's filesystem policy and tamper report
// (agent/protocol.h: `fs_policy {id, read_only, writable}` -> ok | err, `fs_changes {id,
// under, limit}` -> data... with the report). Paths travel in base64: a name need not be UTF-8.
nlohmann::json FsPolicyFields(const isolation::FsPolicy& p);
Result<isolation::FsPolicy> FsPolicyFromFields(const nlohmann::json& h);
std::string EncodeChangeReport(const isolation::ChangeReport& r);
Result<isolation::ChangeReport> DecodeChangeReport(const std::string& data);

int FsHelperMain(int argc, char** argv);

}  // namespace warren::agent
