// Writes a directory tree as a POSIX (pax) tar stream, for `warren image build --from-dir`.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace warren::image {

// Calls `sink` with successive chunks of the archive. Owners, modes, xattrs, hard links,
// symlinks and device nodes are kept; symlinks are not followed.
Status WriteTarOfDir(const std::string& dir,
                     const std::function<Status(const void*, size_t)>& sink);

}  // namespace warren::image
