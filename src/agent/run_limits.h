// A run's limits as the node sends them ({"limits": {cpu_s, as_bytes, stack_bytes, fsize_bytes,
// nproc, nofile}}), read once for both kinds of worker's request (python_request.h,
// native_request.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "isolation/call_limits.h"

namespace warren::agent {

// `obj[key]` as a count: a negative number is 0, a fraction is cut, anything else (absent, of
// another type) is 0.
uint64_t JsonCount(const nlohmann::json& obj, const char* key);

// Each limit of `limits` (0: none asked for).
warren_call_limits RunLimitsFromJson(const nlohmann::json& limits);

}  // namespace warren::agent
