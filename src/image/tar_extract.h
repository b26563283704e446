// Unpacks a tar stream (plain, gzip, zstd, xz: libarchive detects) into a directory,
// preserving owners, modes (setuid included), times, xattrs, hard links, symlinks and
// device nodes. Refuses entries that would land outside the directory ("..", or writing
// through a symlink planted by an earlier entry). Thread-safe: never changes the cwd.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace warren::image {

// A compressed archive may expand without bound: extraction stops with an invalid status past
// these (a layer is one filesystem image, not a disk).
struct ExtractLimits {
  uint64_t max_bytes = 64ull << 30;
  uint64_t max_entries = 4'000'000;
  // `.wh.NAME` entries are OCI whiteouts (an image layer's). Off for a tar of an overlay
  // upper (a microVM's snapshot), whose whiteouts are real and whose `.wh.` names are files.
  bool oci_whiteouts = true;
};

Status ExtractTar(const std::string& tar_path, const std::string& dest_dir,
                  const ExtractLimits& limits = {});

// An archive entry's path made relative and clean ("./a//b/" -> "a/b"); "" for the root
// itself. Sets *bad when the path climbs out with "..".
std::string CleanTarPath(const std::string& in, bool* bad);

// Removes a directory tree without following symlinks.
Status RemoveTree(const std::string& path);

}  // namespace warren::image
