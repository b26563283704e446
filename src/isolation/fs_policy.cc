#include "isolation/fs_policy.h"

#include <algorithm>
#include <set>

namespace warren::isolation {
namespace {

Status CheckPath(const std::string& p) {
  if (p.empty() || p[0] != '/')
    return Invalid("filesystem policy: `" + p + "` is not an absolute path");
  if (p.size() > 4096) return Invalid("filesystem policy: a path is longer than 4096 bytes");
  if (p.find('\0') != std::string::npos)
    return Invalid("filesystem policy: a path holds a NUL byte");
  if (p != "/" && p.back() == '/') return Invalid("filesystem policy: `" + p + "` ends with `/`");
  size_t i = 1;
  while (i <= p.size() && p != "/") {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string_view c(p.data() + i, j - i);
    if (c.empty() || c == "." || c == "..")
      return Invalid("filesystem policy: `" + p +
                     "` is not normalized (empty, `.` or `..` component)");
    i = j + 1;
  }
  return Status::Ok();
}

}  // namespace

bool PathWithin(std::string_view path, std::string_view tree) {
  if (tree == "/") return true;
  if (path.size() < tree.size() || path.compare(0, tree.size(), tree) != 0) return false;
  return path.size() == tree.size() || path[tree.size()] == '/';
}

Result<FsPolicy> NormalizeFsPolicy(FsPolicy p) {
  if (p.read_only.size() + p.writable.size() > kMaxFsPolicyPaths)
    return Invalid("filesystem policy: at most " + std::to_string(kMaxFsPolicyPaths) + " paths");
  for (auto* v : {&p.read_only, &p.writable}) {
    for (const auto& s : *v) WARREN_RETURN_IF_ERROR(CheckPath(s));
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  std::set<std::string> ro(p.read_only.begin(), p.read_only.end());
  for (const auto& w : p.writable)
    if (ro.count(w))
      return Invalid("filesystem policy: `" + w + "` is both read-only and writable");
  return p;
}

bool FsPolicyView::ReadOnly(std::string_view path) const {
  size_t best = 0;
  bool ro = false, found = false;
  auto consider = [&](const std::vector<std::string>& v, bool is_ro) {
    for (const auto& t : v)
      if (PathWithin(path, t) && (!found || t.size() > best))
        best = t.size(), ro = is_ro, found = true;
  };
  consider(p_.read_only, true);
  consider(p_.writable, false);
  return ro;
}

bool FsPolicyView::AnyReadOnlyWithin(std::string_view path) const {
  if (ReadOnly(path)) return true;
  for (const auto& t : p_.read_only)
    if (PathWithin(t, path)) return true;
  return false;
}

}  // namespace warren::isolation
