#include "sys/dir_list.h"

#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "base/unique_fd.h"

namespace warren::sys {

Result<std::vector<std::string>> ListDir(int dirfd, const std::string& rel) {
  UniqueFd fd(openat(dirfd, rel.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open directory", rel);
  DIR* d = fdopendir(fd.Release());
  if (!d) return ErrnoStatus("read directory", rel);
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace warren::sys
