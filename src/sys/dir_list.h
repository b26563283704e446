// Reading a directory by fd, as the tree walks of isolation/ do (never by a path that could
// be swapped under them).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace warren::sys {

// The names in directory `rel` of `dirfd` ("." for `dirfd` itself; a symlink is not
// followed), without "." and "..", sorted.
Result<std::vector<std::string>> ListDir(int dirfd, const std::string& rel = ".");

}  // namespace warren::sys
