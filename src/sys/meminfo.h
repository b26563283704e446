// /proc/meminfo, read by field: the node's swap (isolation/node_swap.h) and the RAM a
// snapshot may build in (node/snapshot_builder.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace warren::sys {

// Field `key` ("MemAvailable", "SwapTotal", ...) in bytes; 0 when absent or unreadable.
uint64_t MeminfoBytes(std::string_view key);

}  // namespace warren::sys
