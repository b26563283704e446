// What the occupant changed relative to its layers (GET /v1/sandboxes/{id}/changes), read from
// the overlay's writable layer, never by hashing the image: every change to the sandbox's root
// lands there (the layers are read-only EROFS), as a file or directory of its own, a whiteout
// (character device 0:0) for a deletion, or an opaque directory (user.overlay.opaque=y) for a
// directory replaced whole. /dev/shm, the one other writable place of the tree (a directory of
// the same tmpfs), is listed too, as added files.
//
// The reader gets directory fds of the writable layer, of /dev/shm's directory and of the layer
// clones, top first (the agent keeps them: agent::kStagingDirFd). Nothing is followed: it only
// lists and stats, never opens a file of the occupant's for reading its contents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::isolation {

enum class ChangeKind { kAdded, kModified, kDeleted };
enum class EntryType { kFile, kDir, kSymlink, kOther };

struct FsChange {
  std::string path;  // inside the sandbox, raw bytes
  ChangeKind kind = ChangeKind::kAdded;
  EntryType type = EntryType::kFile;
  int layer = -1;  // modified or deleted: index of the layer whose entry it shadows (0 = top)
  uint64_t size = 0;
  uint32_t mode = 0;
};

struct ChangeReport {
  std::vector<FsChange> changes;  // sorted by path
  // More than `limit` changes (the first `limit` are listed), or an entry that could not be
  // read: either way the list is not the whole story.
  bool truncated = false;
};

const char* ChangeKindName(ChangeKind k);
const char* EntryTypeName(EntryType t);

// Changes at or below `under` (an absolute, normalized path; "/" for all), at most `limit`.
// `shm_fd` may be -1.
Result<ChangeReport> ReadChanges(int upper_fd, int shm_fd, const std::vector<int>& layer_fds,
                                 const std::string& under, size_t limit);

}  // namespace warren::isolation
