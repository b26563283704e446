// Mounts of a sandbox's own tree onto itself, made from inside its mount namespace (by the
// agent before it seals the sandbox, or by the node's fs helper) and never undone by the
// occupant, which may not mount or unmount (seccomp, no CAP_SYS_ADMIN).
//
// Two uses of one kernel fact: rename(2), rmdir(2) and unlink(2) refuse a mount point (EBUSY),
// and a read-only mount refuses every write below it (EROFS) whatever the caller's privilege.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::isolation {

// Binds the directory `path` onto itself (submounts included): it can no longer be renamed or
// removed, while what is inside stays as writable as it was. A no-op on a mount point.
Status PinInPlace(const std::string& path);

// Binds `path` (a directory or a file) onto itself read-only, submounts included: nothing at
// or below it can be written, created, removed, renamed, linked or have its attributes changed.
Status BindReadOnlyInPlace(const std::string& path);

// Whether `path` (not followed if a symlink) is the root of a mount.
bool IsMountPoint(const std::string& path);

}  // namespace warren::isolation
