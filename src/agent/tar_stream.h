// A directory tree as a POSIX.1-2001 pax tar stream, written by the guest agent so a microVM
// sandbox's overlay upper and workspace layer can be snapshotted: the host reads the stream
// with libarchive (image/tar_extract.cc), which keeps owners, modes, times, xattrs, devices
// and hard links. The agent is static and links no libarchive, hence this small writer.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "base/status.h"

namespace warren::agent {

struct TarStreamStats {
  uint64_t entries = 0;     // tar entries written (pax extended headers not counted)
  uint64_t file_bytes = 0;  // regular file contents, as the headers state them
};

// Writes the tree under `dirfd` (not closed; the directory itself gets no entry) as a pax
// tar stream to `sink`, called with pieces of the stream in order. A non-OK status from
// `sink` stops the walk and is returned as it is. Names are relative ("etc/passwd",
// directories "etc/"), in sorted order per directory, a directory before its contents.
//
// The tree may be changed meanwhile by a hostile root process: every lookup is one name
// beneath an open directory fd, no symlink is followed, an entry that vanishes is left out,
// a regular file is written with the size its header states (zeros for what it lost, its
// growth cut off). Sockets are left out. A tree deeper than 4096 levels is an error. Errors
// name the operation and the entry's relative path, never a path outside the tree.
// `stats` may be null.
Status WriteTarStream(int dirfd, const std::function<Status(std::string_view)>& sink,
                      TarStreamStats* stats);

}  // namespace warren::agent
