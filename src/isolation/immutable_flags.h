// The immutable inode flag (FS_IMMUTABLE_FL, chattr +i) on the files of a sandbox's writable
// layer: the kernel refuses every new write, create, delete, rename, link, attribute or xattr
// change of such an inode or inside such a directory, to every caller, root included. Only
// CAP_LINUX_IMMUTABLE in the host's user namespace sets or clears it, which no sandbox has (a
// container's root is root of its own user namespace only; a microVM's commands drop it), so
// every immutable inode of a sandbox's upper layer was made so by the node.
//
// It does not stop writes through a file opened for writing before the flag was set, nor
// through a shared writable mapping: node/fs_guard severs those files first.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::isolation {

// Reads / sets the flag of the inode open at `fd` (a regular file or a directory).
Result<bool> IsImmutable(int fd);
Status SetImmutable(int fd, bool on, const std::string& what);

// One entry of a walk: its path inside the sandbox ("/usr/bin/x"), whether it is a directory
// (else a regular file: other kinds take no flag; their directory guards them), whether it is
// immutable now (statx: no open needed to know), and where it is (`parent_fd`, `name`; the
// root has parent_fd -1 and `fd` set).
struct FlagWalkEntry {
  const std::string& path;
  bool dir;
  bool immutable;
  int parent_fd;
  const std::string& name;
  int fd = -1;         // the root directory's fd (only for the root)
  uint32_t nlink = 1;  // links to the inode (a regular file's other names may be elsewhere)
};

// Opens the entry read-only (non-blocking, never following a symlink).
Result<UniqueFd> OpenEntry(const FlagWalkEntry& e);

// Visits every directory and regular file of the tree at `dirfd` (the upper layer's root,
// shown as `/`), children before their directory, never following a symlink nor leaving the
// filesystem. `descend(path)` says whether to look inside a directory at all.
// A writable layer nested deeper than this is refused (an `invalid` status naming it).
inline constexpr int kMaxWalkDepth = 512;
using UpperVisitor = std::function<Status(const FlagWalkEntry&)>;
Status WalkUpper(int dirfd, const std::function<bool(const std::string&)>& descend,
                 const UpperVisitor& visit);

// Makes each directory's and regular file's flag what `want(entry)` says (opening only those
// to change); `descend(path)` says whether to look inside a directory at all. Returns how many
// flags changed. Meant for a frozen sandbox: nothing may change under the walk.
Result<size_t> ApplyImmutableFlags(int dirfd, const std::function<bool(const FlagWalkEntry&)>& want,
                                   const std::function<bool(const std::string&)>& descend);

}  // namespace warren::isolation
