#include "agent/run_limits.h"

#include <algorithm>

namespace warren::agent {

using nlohmann::json;

uint64_t JsonCount(const json& obj, const char* key) {
  if (!obj.is_object()) return 0;
  auto it = obj.find(key);
  if (it == obj.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer())
    return static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
  if (it->is_number_float()) return static_cast<uint64_t>(std::max(0.0, it->get<double>()));
  return 0;
}

warren_call_limits RunLimitsFromJson(const json& limits) {
  return {JsonCount(limits, "cpu_s"),       JsonCount(limits, "as_bytes"),
          JsonCount(limits, "stack_bytes"), JsonCount(limits, "fsize_bytes"),
          JsonCount(limits, "nproc"),       JsonCount(limits, "nofile")};
}

}  // namespace warren::agent
