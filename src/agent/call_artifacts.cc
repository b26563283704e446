#include "agent/call_artifacts.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace warren::agent {
namespace {

// A regular file's fd (no link followed, no waiting on a FIFO) and its stat, or -1.
int OpenRegular(int dir, const char* name, struct stat* st) {
  const int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    close(fd);
    return -1;
  }
  return fd;
}

void Add(int dir, const char* name, Artifact* out, size_t* n, uint64_t* total) {
  if (*n >= kMaxArtifacts || !*name || strchr(name, '/')) return;
  struct stat st {};
  const int fd = OpenRegular(dir, name, &st);
  if (fd < 0) return;
  close(fd);
  const auto len = static_cast<uint64_t>(st.st_size);
  if (*total + len > kArtifactLimit) return;
  out[(*n)++] = {dir, name, len, st.st_mode & 0755u};
  *total += len;
}

}  // namespace

int ReopenArtifact(const Artifact& a) {
  struct stat st {};
  const int fd = OpenRegular(a.dir, a.name, &st);
  if (fd >= 0 && static_cast<uint64_t>(st.st_size) != a.len) {
    close(fd);
    return -1;
  }
  return fd;
}

size_t OpenArtifacts(int dir, char* const* collect, size_t ncollect, Artifact* out, char* names,
                     size_t cap) {
  size_t n = 0, used = 0;
  uint64_t total = 0;
  for (size_t c = 0; c < ncollect; ++c) {
    const char* want = collect[c];
    if (strncmp(want, "*.", 2) != 0) {
      Add(dir, want, out, &n, &total);
      continue;
    }
    const size_t suffix = strlen(want) - 1;  // ".EXT"
    // A directory stream of our own (the caller's fd keeps its offset).
    const int list = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (list < 0) continue;
    const char* found[kMaxArtifacts];
    size_t nfound = 0;
    alignas(8) char ents[8192];
    for (;;) {
      const ssize_t got = getdents64(list, ents, sizeof ents);
      if (got <= 0) break;
      for (ssize_t at = 0; at < got;) {
        const auto* e = reinterpret_cast<const struct dirent64*>(ents + at);
        at += e->d_reclen;
        const size_t len = strlen(e->d_name);
        if (len <= suffix || memcmp(e->d_name + len - suffix, want + 1, suffix) != 0) continue;
        if (nfound == kMaxArtifacts || used + len + 1 > cap) continue;
        char* copy = names + used;
        memcpy(copy, e->d_name, len + 1);
        used += len + 1;
        // Kept in name order as they come (a call's directory is small).
        size_t i = nfound++;
        for (; i > 0 && strcmp(found[i - 1], copy) > 0; --i) found[i] = found[i - 1];
        found[i] = copy;
      }
    }
    close(list);
    for (size_t i = 0; i < nfound; ++i) Add(dir, found[i], out, &n, &total);
  }
  return n;
}

}  // namespace warren::agent
