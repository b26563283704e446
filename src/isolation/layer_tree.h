// Building a layer's tree from overlay directories (issue 30: a sandbox's snapshot). An
// overlay upper holds what the occupant changed: files and directories as they are now,
// deletions as whiteouts (character devices 0/0), directories that replace a lower one whole
// as opaque (the overlay.opaque xattr). Applying such a tree onto another gives what a single
// layer must hold to stand for both: applying the sandbox's workspace layer, then its upper,
// onto an empty directory flattens them into one workspace layer over the same image.
//
// The source is walked by host root in a tree the occupant controls: every lookup is one
// name beneath an open directory, never following a symlink. Ids are shifted back from the
// sandbox's host range into the layer's own (the upper of a container holds host ids; ACLs
// and file capabilities carry ids too); an id outside the range is an error, not a guess.
// Overlay's own bookkeeping (origin, impure, uuid xattrs) is left out; opaque directories
// are written with both xattr names, as imported layers are (image/tar_extract.cc).
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "base/status.h"

namespace warren::isolation {

struct LayerTreeOptions {
  uint32_t id_base = 0;        // the source's ids are [id_base, id_base + id_count)
  uint32_t id_count = 65536;   // the layer's are [0, id_count)
  std::set<std::string> skip;  // paths ("/etc/resolv.conf") not taken from the source
  // File bytes copied into the destination, over every call with the same `stats`, at most
  // (0: no bound): beyond it the apply stops with kQuota (the caller removes the tree).
  uint64_t max_bytes = 0;
};

struct LayerTreeStats {
  uint64_t entries = 0, bytes = 0, whiteouts = 0;
};

// Applies the tree at `src_dirfd` onto the directory at `dst_dirfd` (ours: created by the
// caller), adding to `stats` (several trees applied in turn count together against
// `max_bytes`). Errors name the path as the sandbox sees it, never a host path.
Status ApplyLayerTree(int src_dirfd, int dst_dirfd, const LayerTreeOptions& opts,
                      LayerTreeStats* stats);

}  // namespace warren::isolation
