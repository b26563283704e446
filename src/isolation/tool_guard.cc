#include "isolation/tool_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "base/unique_fd.h"
#include "isolation/bind_pins.h"
#include "isolation/fs_policy.h"
#include "sys/dir_list.h"

namespace warren::isolation {
namespace {

std::string Parent(const std::string& p) {
  size_t i = p.rfind('/');
  return i == 0 ? "/" : p.substr(0, i);
}

bool InOtherLayer(const std::vector<int>& others, const std::string& path) {
  struct stat st;
  for (int fd : others)
    if (fstatat(fd, path.c_str() + 1, &st, AT_SYMLINK_NOFOLLOW) == 0) return true;
  return false;
}

// Under /opt/tools/NAME (depth three or more): a tool's own tree.
bool InToolsDir(const std::string& p) { return p.rfind("/opt/tools/", 0) == 0 && p.size() > 11; }

struct Walker {
  const std::vector<int>& others;
  std::set<std::string> ro;

  Status Walk(int dirfd, const std::string& rel) {
    for (const auto& name : WARREN_TRY(sys::ListDir(dirfd))) {
      const std::string path = (rel == "/" ? "" : rel) + "/" + name;
      struct stat st;
      if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return ErrnoStatus("stat tool file", path);
      if (S_ISDIR(st.st_mode)) {
        // /opt and /opt/tools stay open to others (only pinned) even where no other layer has them.
        if (InToolsDir(path) ||
            (path != "/opt" && path != "/opt/tools" && !InOtherLayer(others, path))) {
          ro.insert(path);
          continue;
        }
        UniqueFd sub(openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub) return ErrnoStatus("open tool layer directory", path);
        WARREN_RETURN_IF_ERROR(Walk(sub.get(), path));
      } else if (S_ISLNK(st.st_mode)) {
        if (rel != "/") ro.insert(rel);
      } else if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
        // A whiteout: a base file the tool deletes; nothing to guard.
      } else {
        ro.insert(path);
      }
      if (ro.size() > kMaxToolGuardMounts)
        return Invalid("tool layer: more than " + std::to_string(kMaxToolGuardMounts) +
                       " files outside directories of its own (keep a tool under /opt/tools/NAME)");
    }
    return Status::Ok();
  }
};

// Drops read-only paths below another one; pins every directory above what is left.
ToolGuardPlan Finish(const std::set<std::string>& ro_in) {
  ToolGuardPlan plan;
  for (const auto& p : ro_in) {  // std::set order: a parent comes before its children
    if (!plan.read_only.empty() && PathWithin(p, plan.read_only.back())) continue;
    bool covered = false;
    for (const auto& r : plan.read_only) covered = covered || PathWithin(p, r);
    if (!covered) plan.read_only.push_back(p);
  }
  std::set<std::string> pins;
  for (const auto& p : plan.read_only)
    for (std::string a = Parent(p); a != "/"; a = Parent(a)) pins.insert(a);
  plan.pins.assign(pins.begin(), pins.end());
  return plan;
}

}  // namespace

Result<ToolGuardPlan> PlanToolGuard(int layer_fd, const std::vector<int>& other_layer_fds) {
  Walker w{other_layer_fds, {}};
  WARREN_RETURN_IF_ERROR(w.Walk(layer_fd, "/"));
  return Finish(w.ro);
}

ToolGuardPlan MergeToolGuardPlans(const std::vector<ToolGuardPlan>& plans) {
  std::set<std::string> ro;
  for (const auto& p : plans) ro.insert(p.read_only.begin(), p.read_only.end());
  return Finish(ro);
}

Status ApplyToolGuard(const ToolGuardPlan& plan, const std::string& root) {
  // Pins first, parents before children: each later mount lands on top of the ones above it.
  for (const auto& p : plan.pins)
    WARREN_RETURN_IF_ERROR(PinInPlace(root + p).Context("guard tool directory"));
  for (const auto& p : plan.read_only)
    WARREN_RETURN_IF_ERROR(BindReadOnlyInPlace(root + p).Context("guard tool files"));
  return Status::Ok();
}

}  // namespace warren::isolation
