// The files a native run brings back (a compiler's output: "main", or every "*.class"), opened
// by its pid 1 once the run is over. Allocates nothing: pid 1 runs in the native forker's
// memory (call_worker.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace warren::agent {

struct Artifact {
  int dir;  // where it is (the caller's fd)
  const char* name;
  uint64_t len;
  unsigned mode;  // its permission bits, within 0755
};

inline constexpr size_t kMaxArtifacts = 1024;
inline constexpr uint64_t kArtifactLimit = 64ull << 20;  // all of them together

// Finds in `dir` each file `collect` names: "NAME", or "*.EXT" for every name that ends in .EXT,
// in name order. Only regular files (no link followed, no waiting on a FIFO), names without a
// slash, and no file that would take the total past kArtifactLimit. Names found by a pattern are
// copied into `names` (`cap` bytes); `out` has room for kMaxArtifacts. Returns how many. No fd
// stays open (a compile's RLIMIT_NOFILE would cut a long list short).
size_t OpenArtifacts(int dir, char* const* collect, size_t ncollect, Artifact* out, char* names,
                     size_t cap);

// The file `a` found, opened again to be read, or -1 if it is no longer the regular file of the
// size it was.
int ReopenArtifact(const Artifact& a);

}  // namespace warren::agent
