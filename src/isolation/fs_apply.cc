#include "isolation/fs_apply.h"

#include <errno.h>
#include <fcntl.h>

#include <set>

#include "base/unique_fd.h"

#include "isolation/immutable_flags.h"
#include "isolation/write_leases.h"

namespace warren::isolation {

Result<FsPolicyStats> ApplyFsPolicyToUpper(int upper_fd, const FsPolicy& policy, const FsApplySteps& steps) {
  FsPolicyStats stats;
  if (policy.empty()) {
    // Everything writable: every flag comes off.
    stats.flags_changed = WARREN_TRY(
        ApplyImmutableFlags(upper_fd, [](const FlagWalkEntry&) { return false; }, [](const std::string&) { return true; }));
    return stats;
  }
  WARREN_RETURN_IF_ERROR(steps.check(policy));
  // 1. Off, on every directory: the overlay must be able to copy up and create what the new
  // policy needs. A flagged file stays flagged for now: none has a writer (it was flagged
  // with none, and none can open it for writing since), so none needs severing.
  stats.flags_changed += WARREN_TRY(ApplyImmutableFlags(
      upper_fd, [](const FlagWalkEntry& e) { return !e.dir && e.immutable; }, [](const std::string&) { return true; }));

  // 2. Resolve, copy up, pin.
  const FsPrepared prep = WARREN_TRY(steps.prepare(policy));
  const FsPolicyView view(FsPolicy{prep.read_only, prep.writable});
  const std::set<std::string> fixed(prep.fixed_dirs.begin(), prep.fixed_dirs.end());
  auto want = [&](const FlagWalkEntry& e) { return view.ReadOnly(e.path) || (e.dir && fixed.count(e.path)); };
  // Everything is looked at: a file flagged before may now be in a writable tree.
  auto all = [](const std::string&) { return true; };

  // 3. Files about to become immutable that someone could still write through.
  std::vector<std::string> writers;
  std::vector<UniqueFd> old_inodes;
  WARREN_RETURN_IF_ERROR(WalkUpper(upper_fd, all, [&](const FlagWalkEntry& e) -> Status {
    if (e.dir || e.immutable || !want(e)) return Status::Ok();
    UniqueFd fd = WARREN_TRY(OpenEntry(e));
    auto has = HasWriters(fd.get(), e.path);
    // Leases off on this host (fs.leases-enable 0): nobody can tell, so every such file is
    // severed, as if it had a writer.
    if (!has.ok() && has.status().err() != EINVAL) return has.status();
    if (has.ok() && !*has) return Status::Ok();
    writers.push_back(e.path);
    old_inodes.push_back(std::move(fd));
    return Status::Ok();
  }));
  if (!writers.empty()) {
    WARREN_RETURN_IF_ERROR(steps.sever(writers));
    stats.severed = writers.size();
    for (size_t i = 0; i < old_inodes.size(); ++i)
      WARREN_RETURN_IF_ERROR(SetImmutable(old_inodes[i].get(), true, writers[i] + " (severed)"));
  }

  // 4. On.
  stats.flags_changed += WARREN_TRY(ApplyImmutableFlags(upper_fd, want, all));
  return stats;
}

}  // namespace warren::isolation
