// Backing device info (/sys/class/bdi): a filesystem's readahead window.
//
// A file-backed EROFS mount gets a bdi of its own, "erofs-<n>" (super_setup_bdi), with the
// kernel's default 128 KiB readahead. Nothing in sysfs or mountinfo links a mount to it (its
// sysfs device carries no dev_t), so the caller lists the names before and after mounting:
// the new one is the mount's when exactly one appeared (a name is never reused).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "base/status.h"

namespace warren::sys {

// The bdi names starting with `prefix` now.
Result<std::set<std::string>> ListBdis(std::string_view prefix);
// The one name in `after` and not in `before`, or "" when none or several are.
std::string NewBdi(const std::set<std::string>& before, const std::set<std::string>& after);
Status SetBdiReadaheadKb(const std::string& bdi, uint32_t kb);

}  // namespace warren::sys
