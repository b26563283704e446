#include "node/density/density_types.h"

#include "base/json_fields.h"

namespace warren::node::density {

nlohmann::json SandboxDensityJson(const SandboxDensity& d) {
  return {{"activity", std::string(ActivityName(d.activity))},
          {"user_paused", d.user_paused},
          {"quiet_s", d.quiet_s},
          {"cpus", d.cpus},
          {"resident_bytes", d.memory.resident_bytes},
          {"anon_bytes", d.memory.anon_bytes},
          {"file_bytes", d.memory.file_bytes},
          {"swapped_bytes", d.memory.swapped_bytes},
          {"limit_bytes", d.memory.limit_bytes},
          {"reclaimed_bytes", d.reclaimed_bytes},
          {"wakes", d.wakes},
          {"last_wake_ms", d.last_wake_ms},
          {"max_wake_ms", d.max_wake_ms}};
}

nlohmann::json NodeDensityJson(const NodeDensity& n) {
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [k, v] : n.sandboxes) counts[k] = v;
  return {{"enabled", n.enabled},
          {"memory_budget_bytes", n.budget_bytes},
          {"memory_overcommit", n.memory_overcommit},
          {"cpu_overcommit", n.cpu_overcommit},
          {"committed_memory_bytes", n.committed_memory_bytes},
          {"committed_cpus", n.committed_cpus},
          {"host_cpus", n.host_cpus},
          {"used_bytes", n.used_bytes},
          {"reclaimed_bytes", n.reclaimed_bytes},
          {"pressure_reclaims", n.pressure_reclaims},
          {"refused_creates", n.refused_creates},
          {"sandboxes", counts},
          {"wakes", n.wakes},
          {"wake_p50_ms", n.wake_p50_ms},
          {"wake_p99_ms", n.wake_p99_ms},
          {"wake_max_ms", n.wake_max_ms},
          {"swap",
           {{"mode", n.swap_mode},
            {"device", n.swap_device},
            {"error", n.swap_error},
            {"size_bytes", n.swap.size_bytes},
            {"used_bytes", n.swap.used_bytes},
            {"compressed_bytes", n.swap.compressed_bytes},
            {"ram_bytes", n.swap.ram_bytes}}}};
}

Result<SandboxDensity> ParseSandboxDensity(const nlohmann::json& j) {
  JsonFields f(j, "sandbox density");
  WARREN_RETURN_IF_ERROR(f.Object());
  SandboxDensity d;
  std::string activity;
  WARREN_RETURN_IF_ERROR(f.String("activity", &activity));
  bool known = false;
  for (Activity a : {Activity::kActive, Activity::kIdle, Activity::kHibernated})
    if (ActivityName(a) == activity) d.activity = a, known = true;
  if (!known) return Invalid("sandbox density: unknown `activity` " + activity);
  WARREN_RETURN_IF_ERROR(f.Bool("user_paused", &d.user_paused, true));
  WARREN_RETURN_IF_ERROR(f.Double("quiet_s", &d.quiet_s));
  WARREN_RETURN_IF_ERROR(f.Double("cpus", &d.cpus));
  WARREN_RETURN_IF_ERROR(f.UInt("resident_bytes", &d.memory.resident_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("anon_bytes", &d.memory.anon_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("file_bytes", &d.memory.file_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("swapped_bytes", &d.memory.swapped_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("limit_bytes", &d.memory.limit_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("reclaimed_bytes", &d.reclaimed_bytes));
  WARREN_RETURN_IF_ERROR(f.UInt("wakes", &d.wakes));
  WARREN_RETURN_IF_ERROR(f.Double("last_wake_ms", &d.last_wake_ms));
  WARREN_RETURN_IF_ERROR(f.Double("max_wake_ms", &d.max_wake_ms));
  WARREN_RETURN_IF_ERROR(f.NoOthers());
  return d;
}

}  // namespace warren::node::density
