// Aborting a FUSE connection from outside its daemon's loop.
//
// `umount2(MNT_FORCE)` of a FUSE mount aborts the connection: every request still pending ends
// with an error at once. That is the one way out for a thread asleep in a page cache store
// (FUSE_NOTIFY_STORE waits on any page an unanswered read holds locked) when no one will answer
// the read: such a thread cannot be killed, nor can its process. blobfsd does it to itself at
// exit (blobfs/fuse_server.cc), the node to a blobfsd that will not die (node/lazy_layers.cc).
#pragma once

#include <string>

#include "base/status.h"

namespace warren::sys {

// Aborts the FUSE connection mounted at `mountpoint`. The unmount itself may then fail as busy
// (the mount stays until detached) and a mount already gone is no error: both are Ok.
Status AbortFuseConnection(const std::string& mountpoint);

}  // namespace warren::sys
