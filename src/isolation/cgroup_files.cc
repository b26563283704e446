#include "isolation/cgroup_files.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <charconv>

#include "base/unique_fd.h"

namespace warren::isolation {
namespace {

bool IsFs(const std::string& path, long magic) {
  struct statfs sf;
  return statfs(path.c_str(), &sf) == 0 && static_cast<long>(sf.f_type) == magic;
}

}  // namespace

std::string CgroupLayout::v1_memory() const {
  for (const std::string& r : v1_roots)
    if (r.ends_with("/memory")) return r;
  return "";
}

const CgroupLayout& GetCgroupLayout() {
  static const CgroupLayout layout = [] {
    CgroupLayout l;
    if (IsFs(kCgroupRoot, CGROUP2_SUPER_MAGIC)) {
      l.pure_v2 = true;
      l.v2_root = kCgroupRoot;
      return l;
    }
    std::string unified = std::string(kCgroupRoot) + "/unified";
    if (IsFs(unified, CGROUP2_SUPER_MAGIC)) l.v2_root = unified;
    for (const char* c : {"memory", "cpu", "pids"}) {
      std::string p = std::string(kCgroupRoot) + "/" + c;
      if (IsFs(p, CGROUP_SUPER_MAGIC)) l.v1_roots.push_back(p);
    }
    return l;
  }();
  return layout;
}

bool PathExists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

Status WriteCgroupFile(const std::string& path, const std::string& data) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return ErrnoStatus("write `" + data + "` to", path);
  return Status::Ok();
}

Result<std::string> ReadCgroupFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open", path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) break;  // no cgroup file is this big
  }
  return out;
}

std::optional<uint64_t> ReadCgroupNumber(const std::string& path) {
  auto text = ReadCgroupFile(path);
  if (!text.ok()) return std::nullopt;
  uint64_t v = 0;
  const char* b = text->data();
  auto [ptr, ec] = std::from_chars(b, b + text->size(), v);
  if (ec != std::errc()) return std::nullopt;
  return v;
}

std::optional<uint64_t> StatValue(const std::string& text, const std::string& key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    if (text.compare(pos, key.size(), key) == 0 && pos + key.size() < eol &&
        text[pos + key.size()] == ' ') {
      uint64_t v = 0;
      const char* b = text.data() + pos + key.size() + 1;
      auto [ptr, ec] = std::from_chars(b, text.data() + eol, v);
      if (ec == std::errc()) return v;
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

}  // namespace warren::isolation
