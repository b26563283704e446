#include "node/density/idle_clock.h"

namespace warren::node::density {

std::string_view ActivityName(Activity a) {
  switch (a) {
    case Activity::kActive:
      return "active";
    case Activity::kIdle:
      return "idle";
    case Activity::kHibernated:
      return "hibernated";
  }
  return "active";
}

void IdleClock::Sample(Clock::time_point now, uint64_t cpu_usec, double pressure,
                       const IdleThresholds& t, double quiet_cpus) {
  if (sampled_ && now > last_sample_) {
    const double secs = std::chrono::duration<double>(now - last_sample_).count();
    const uint64_t used = cpu_usec >= last_cpu_usec_ ? cpu_usec - last_cpu_usec_ : 0;
    cpus_ = static_cast<double>(used) / 1e6 / secs;
    const bool stalling = pressure > t.busy_pressure && QuietFor(now) < t.idle_after;
    if (cpus_ > quiet_cpus + t.busy_cpus || stalling) Touch(now);
  }
  sampled_ = true;
  last_sample_ = now;
  last_cpu_usec_ = cpu_usec;
}

Clock::duration IdleClock::QuietFor(Clock::time_point now) const {
  return now > last_busy_ ? now - last_busy_ : Clock::duration::zero();
}

Activity IdleClock::Want(Clock::time_point now, const IdleThresholds& t) const {
  const auto quiet = QuietFor(now);
  if (quiet < t.idle_after) return Activity::kActive;
  if (t.hibernate_after.count() > 0 && quiet >= t.hibernate_after) return Activity::kHibernated;
  return Activity::kIdle;
}

}  // namespace warren::node::density
