// Unpacks a tar stream (plain, gzip, zstd, xz: libarchive detects) into a directory,
// preserving owners, modes (setuid included), times, xattrs, hard links, symlinks and
// device nodes. Refuses entries that would land outside the directory ("..", or writing
// through a symlink planted by an earlier entry). Thread-safe: never changes the cwd.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::image {

Status ExtractTar(const std::string& tar_path, const std::string& dest_dir);

// Removes a directory tree without following symlinks.
Status RemoveTree(const std::string& path);

}  // namespace warren::image
