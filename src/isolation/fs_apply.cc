#include "isolation/fs_apply.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <set>

#include "base/unique_fd.h"
#include "isolation/immutable_flags.h"
#include "isolation/write_leases.h"

namespace warren::isolation {

namespace {

std::string Parent(const std::string& p) {
  size_t i = p.rfind('/');
  return i == 0 ? "/" : p.substr(0, i);
}

auto All() {
  return [](const std::string&) { return true; };
}

// Steps 1-4 of fs_apply.h (the policy is not empty and was checked).
Status Apply(int upper_fd, const FsPolicy& policy, const FsApplySteps& steps,
             FsPolicyStats* stats) {
  // 1. Off, on every directory: the overlay must be able to copy up and create what the new
  // policy needs. A flagged file stays flagged for now: none has a writer (it was flagged
  // with none, and none can open it for writing since), so none needs severing.
  stats->flags_changed += WARREN_TRY(ApplyImmutableFlags(
      upper_fd, [](const FlagWalkEntry& e) { return !e.dir && e.immutable; }, All()));

  // 2. Resolve, copy up, pin.
  const FsPrepared prep = WARREN_TRY(steps.prepare(policy));
  const FsPolicyView view(FsPolicy{prep.read_only, prep.writable});
  const std::set<std::string> fixed(prep.fixed_dirs.begin(), prep.fixed_dirs.end());
  auto want = [&](const FlagWalkEntry& e) {
    return view.ReadOnly(e.path) || (e.dir && fixed.count(e.path));
  };

  // 3. Files about to become immutable that someone could still write through, and files
  // with other names (a hard link made before, perhaps from a writable tree: one flag on the
  // shared inode cannot be right for both names, so the read-only name gets its own inode).
  std::vector<std::string> sever;
  std::vector<UniqueFd> old_inodes;
  WARREN_RETURN_IF_ERROR(WalkUpper(upper_fd, All(), [&](const FlagWalkEntry& e) -> Status {
    if (e.dir || e.immutable || !want(e)) return Status::Ok();
    UniqueFd fd = WARREN_TRY(OpenEntry(e));
    if (e.nlink <= 1) {
      auto has = HasWriters(fd.get(), e.path);
      // Leases off on this host (fs.leases-enable 0): nobody can tell, so every such file is
      // severed, as if it had a writer.
      if (!has.ok() && has.status().err() != EINVAL) return has.status();
      if (has.ok() && !*has) return Status::Ok();
    }
    sever.push_back(e.path);
    old_inodes.push_back(std::move(fd));
    return Status::Ok();
  }));
  if (!sever.empty()) {
    WARREN_RETURN_IF_ERROR(steps.sever(sever));
    stats->severed = sever.size();
    // An old inode no name reaches any more (only the descriptors opened before) gets the
    // flag too, so reopening one through /proc/PID/fd for writing is refused; one that keeps
    // another name elsewhere is that name's business.
    for (size_t i = 0; i < old_inodes.size(); ++i) {
      struct stat st;
      if (fstat(old_inodes[i].get(), &st) == 0 && st.st_nlink == 0)
        WARREN_RETURN_IF_ERROR(SetImmutable(old_inodes[i].get(), true, sever[i] + " (severed)"));
    }
  }

  // 4. On, and off everything else.
  stats->flags_changed += WARREN_TRY(ApplyImmutableFlags(upper_fd, want, All()));
  return Status::Ok();
}

}  // namespace

Result<FsPolicyStats> ApplyFsPolicyToUpper(int upper_fd, const FsPolicy& policy,
                                           const FsApplySteps& steps) {
  FsPolicyStats stats;
  if (policy.empty()) {
    // Everything writable: every flag comes off (a failure midway leaves more read-only
    // than asked, never less).
    stats.flags_changed = WARREN_TRY(ApplyImmutableFlags(
        upper_fd, [](const FlagWalkEntry&) { return false; }, All()));
    return stats;
  }
  WARREN_RETURN_IF_ERROR(steps.check(policy));
  // What is flagged and what exists before anything changes, so that a failure midway (a
  // full disk when severing, a helper that dies) puts the sandbox back as it was before it is
  // thawed: flags restored, and whatever was copied up meanwhile under a flagged directory
  // flagged too.
  std::set<std::string> flagged, existed;
  WARREN_RETURN_IF_ERROR(WalkUpper(upper_fd, All(), [&](const FlagWalkEntry& e) -> Status {
    existed.insert(e.path);
    if (e.immutable) flagged.insert(e.path);
    return Status::Ok();
  }));
  Status st;
  try {
    st = Apply(upper_fd, policy, steps, &stats);
  } catch (const std::exception& e) {
    st = Internal("apply filesystem policy", "writable layer", e.what());
  }
  if (st.ok()) return stats;
  auto was = [&](const FlagWalkEntry& e) {
    std::string p = e.path;
    while (!existed.count(p) && p != "/") p = Parent(p);  // a new entry: as the nearest old one
    return flagged.count(p) > 0 && (p == e.path || flagged.count(p));
  };
  auto restored = ApplyImmutableFlags(upper_fd, was, All());
  if (!restored.ok())
    return st.Context(
        "(and restoring the flags before it failed too: " + restored.status().ToString() + ")");
  return st;
}

}  // namespace warren::isolation
