#include "server/auth.h"

#include <fcntl.h>
#include <unistd.h>

#include "base/ids.h"
#include "base/unique_fd.h"

namespace warren::server {

Result<std::string> LoadOrCreateAdminToken(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd) {
    char buf[256];
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) return ErrnoStatus("read", path);
    std::string tok(buf, static_cast<size_t>(n));
    while (!tok.empty() && (tok.back() == '\n' || tok.back() == ' ')) tok.pop_back();
    if (tok.size() < 16) return Invalid("token file holds no usable token", path);
    return tok;
  }
  if (errno != ENOENT) return ErrnoStatus("open", path);
  std::string tok = "wt_" + RandomHex(24);
  UniqueFd out(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out) return ErrnoStatus("create", path);
  std::string line = tok + "\n";
  if (write(out.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return ErrnoStatus("write", path);
  return tok;
}

bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() < kPrefix.size() || header.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view given = header.substr(kPrefix.size());
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(token[i] ^ (i < given.size() ? given[i] : 0));
  return diff == 0;
}

}  // namespace warren::server
