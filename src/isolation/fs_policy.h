// A sandbox's filesystem policy: which trees of its root are read-only for the occupant, root
// included, and which trees inside those stay writable. Set at create, changed while the
// sandbox runs (PUT /v1/sandboxes/{id}/filesystem); enforced by node/fs_guard.
//
// A path is read-only when the nearest listed tree at or above it is in `read_only`; a path
// under no listed tree is writable. Paths are absolute and normalized (no `.`, `..`, `//` or
// trailing `/`). Listed paths are resolved inside the sandbox when the policy is applied, so a
// symlink such as Debian's /lib -> usr/lib protects what it points to (and the link itself).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace warren::isolation {

inline constexpr size_t kMaxFsPolicyPaths = 64;

struct FsPolicy {
  std::vector<std::string> read_only;
  std::vector<std::string> writable;

  bool empty() const { return read_only.empty() && writable.empty(); }
  bool operator==(const FsPolicy&) const = default;
};

// Checks and normalizes a policy's paths (sorted, duplicates removed); a path listed as both
// read-only and writable is an error.
Result<FsPolicy> NormalizeFsPolicy(FsPolicy p);

// A policy over resolved paths: decides, for any path, whether it is read-only.
class FsPolicyView {
 public:
  explicit FsPolicyView(const FsPolicy& resolved) : p_(resolved) {}
  // The nearest listed tree at or above `path` decides.
  bool ReadOnly(std::string_view path) const;
  // Whether anything at or below `path` is read-only (a walk need not descend otherwise).
  bool AnyReadOnlyWithin(std::string_view path) const;

 private:
  FsPolicy p_;
};

// True if `path` is `tree` or lies below it ("/" holds everything).
bool PathWithin(std::string_view path, std::string_view tree);

}  // namespace warren::isolation
