#include "agent/tar_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "isolation/beneath.h"
#include "sys/dir_list.h"

namespace warren::agent {
namespace {

constexpr size_t kBlock = 512;
constexpr size_t kChunk = 64 * 1024;
constexpr size_t kMaxDepth = 4096;
// Directories deeper than this give up their fd while a subdirectory is walked and get it
// back through ".." after: RLIMIT_NOFILE is 1024 by default, a 4096-level chain of open
// directories would run out of fds.
constexpr size_t kHeldLevels = 64;
// XATTR_LIST_MAX and XATTR_SIZE_MAX (linux/limits.h): the kernel never gives more.
constexpr size_t kXattrMax = 65536;
// A name whose type changes between the stat and the open is looked at again, this often.
constexpr int kOpenAttempts = 3;
constexpr uint64_t kMaxUstarId = 07777777;

using Xattrs = std::vector<std::pair<std::string, std::string>>;

// What one entry's headers say.
struct Entry {
  std::string name;  // relative, a directory's with a trailing "/"
  char type = '0';
  struct stat st {};  // mode, ids, mtime, rdev
  uint64_t size = 0;  // bytes of data after the header
  std::string link;   // symlink target or hard link's first name
  Xattrs xattrs;
};

// A numeric ustar field of `width` bytes: width-1 octal digits and a NUL. False, with the
// field left alone, when `v` does not fit.
bool PutOctal(char* field, size_t width, uint64_t v) {
  const size_t digits = width - 1;
  if (v >> (3 * digits) != 0) return false;
  for (size_t i = digits; i-- > 0; v >>= 3) field[i] = static_cast<char>('0' + (v & 7));
  field[digits] = '\0';
  return true;
}

// "LEN KEY=VALUE\n", LEN counting the whole record including its own digits (POSIX pax).
void AddRecord(std::string* out, std::string_view key, std::string_view value) {
  const size_t base = key.size() + value.size() + 3;  // ' ', '=' and '\n'
  size_t digits = 1;
  while (std::to_string(base + digits).size() != digits) ++digits;
  *out += std::to_string(base + digits);
  *out += ' ';
  out->append(key);
  *out += '=';
  out->append(value);
  *out += '\n';
}

// The integer part is tv_sec even when negative, the fraction tv_nsec: libarchive (the host's
// reader) parses "-1.5" as {-1, 500000000} and writes times the same way, where POSIX would
// mean -1.5 s.
std::string PaxTime(const timespec& t) {
  char buf[48];
  snprintf(buf, sizeof buf, "%lld.%09ld", static_cast<long long>(t.tv_sec), t.tv_nsec);
  return buf;
}

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Name, magic and checksum of a header block whose numeric fields are set.
void Seal(char* b, std::string_view name, char type) {
  memcpy(b, name.data(), std::min<size_t>(name.size(), 100));  // a longer name is in pax
  b[156] = type;
  memcpy(b + 257, "ustar", 6);  // with its NUL
  memcpy(b + 263, "00", 2);
  memset(b + 148, ' ', 8);  // the checksum counts its own field as spaces
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += static_cast<unsigned char>(b[i]);
  PutOctal(b + 148, 7, sum);  // six digits, NUL, and the space already there
}

// The entry's header block, after a pax extended header ('x') when a value does not fit
// ustar or the entry has xattrs.
std::string EncodeHeaders(const Entry& e) {
  std::string pax;
  char b[kBlock] = {};
  const bool long_name = e.name.size() > 100, long_link = e.link.size() > 100;
  // A Linux name is bytes, not necessarily UTF-8: BINARY makes libarchive take a path record
  // as it is instead of converting it from UTF-8 to its locale's charset, which turns
  // anything not ASCII into '?' in the C locale. Only then: GNU tar warns about the keyword.
  if ((long_name && !IsAscii(e.name)) || (long_link && !IsAscii(e.link)))
    AddRecord(&pax, "hdrcharset", "BINARY");
  if (long_name) AddRecord(&pax, "path", e.name);
  if (long_link) AddRecord(&pax, "linkpath", e.link);
  memcpy(b + 157, e.link.data(), std::min<size_t>(e.link.size(), 100));
  PutOctal(b + 100, 8, e.st.st_mode & 07777);
  if (!PutOctal(b + 108, 8, e.st.st_uid)) {
    AddRecord(&pax, "uid", std::to_string(e.st.st_uid));
    PutOctal(b + 108, 8, kMaxUstarId);
  }
  if (!PutOctal(b + 116, 8, e.st.st_gid)) {
    AddRecord(&pax, "gid", std::to_string(e.st.st_gid));
    PutOctal(b + 116, 8, kMaxUstarId);
  }
  if (!PutOctal(b + 124, 12, e.size)) {  // 8 GiB and more
    AddRecord(&pax, "size", std::to_string(e.size));
    PutOctal(b + 124, 12, 0);
  }
  const timespec& mt = e.st.st_mtim;
  const bool mtime_fits = mt.tv_sec >= 0 && PutOctal(b + 136, 12, mt.tv_sec);
  if (!mtime_fits) PutOctal(b + 136, 12, 0);
  if (!mtime_fits || mt.tv_nsec != 0) AddRecord(&pax, "mtime", PaxTime(mt));
  // Always fit: the kernel's dev_t has a 12-bit major and a 20-bit minor.
  PutOctal(b + 329, 8, major(e.st.st_rdev));
  PutOctal(b + 337, 8, minor(e.st.st_rdev));
  for (const auto& [name, value] : e.xattrs) AddRecord(&pax, "SCHILY.xattr." + name, value);
  Seal(b, e.name, e.type);

  std::string out;
  if (!pax.empty()) {
    char x[kBlock] = {};
    PutOctal(x + 100, 8, 0644);
    PutOctal(x + 108, 8, 0);
    PutOctal(x + 116, 8, 0);
    PutOctal(x + 124, 12, pax.size());
    PutOctal(x + 136, 12, 0);
    PutOctal(x + 329, 8, 0);
    PutOctal(x + 337, 8, 0);
    // Readers without pax extract this as a file; its name only has to be harmless.
    std::string base = e.name;
    if (!base.empty() && base.back() == '/') base.pop_back();
    base = "PaxHeaders/" + base.substr(base.rfind('/') + 1);
    Seal(x, base, 'x');
    out.append(x, kBlock);
    out += pax;
    out.append((kBlock - pax.size() % kBlock) % kBlock, '\0');
  }
  out.append(b, kBlock);
  return out;
}

// `get(buf, size)` (a *listxattr or *getxattr) into `out`: asks the size first, so the
// common entry without xattrs costs one call and no buffer; the list or value may grow
// between the calls (ERANGE), then the kernel's maximum is room enough.
template <typename Get>
ssize_t ReadSized(const Get& get, std::string* out) {
  ssize_t n = get(nullptr, 0);
  if (n <= 0) return n;
  out->resize(static_cast<size_t>(n));
  n = get(out->data(), out->size());
  if (n < 0 && errno == ERANGE) {
    out->resize(kXattrMax);
    n = get(out->data(), out->size());
  }
  out->resize(n < 0 ? 0 : static_cast<size_t>(n));
  return n;
}

// Every xattr of the entry, all namespaces (the host filters). Symlinks, devices and FIFOs
// are open as O_PATH only (opening a device could have effects, a symlink cannot be opened),
// and f*xattr refuse O_PATH fds (EBADF, still on 6.18): those are read through
// "/proc/self/fd/N", a magic link that lands on the inode the fd holds and is not followed
// further, so a symlink's own xattrs are read, never its target's. /proc is mounted in the
// guest (agent/vm_init.cc).
Status ReadXattrs(int fd, bool o_path, const std::string& rel, Xattrs* out) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  std::string names;
  const ssize_t n = ReadSized(
      [&](char* buf, size_t size) {
        return o_path ? listxattr(proc.c_str(), buf, size) : flistxattr(fd, buf, size);
      },
      &names);
  if (n < 0) {
    if (errno == ENOTSUP) return Status::Ok();  // a filesystem without xattrs
    return ErrnoStatus(o_path ? "list xattrs through /proc/self/fd" : "list xattrs", rel);
  }
  for (size_t off = 0; off < names.size();) {
    const std::string name(names.data() + off);
    off += name.size() + 1;
    // POSIX pax ends a record's key at the first '=': such a name cannot be written.
    if (name.find('=') != std::string::npos)
      return Invalid("an xattr name with '=' cannot go into a tar: " + name, rel);
    std::string value;
    const ssize_t v = ReadSized(
        [&](char* buf, size_t size) {
          return o_path ? getxattr(proc.c_str(), name.c_str(), buf, size)
                        : fgetxattr(fd, name.c_str(), buf, size);
        },
        &value);
    if (v < 0) {
      if (errno == ENODATA) continue;  // removed meanwhile
      return ErrnoStatus("read xattr " + name, rel);
    }
    out->emplace_back(name, std::move(value));
  }
  return Status::Ok();
}

// One name of a directory, open, with the stat of what is open (not of what the name meant a
// moment earlier). `fd` invalid: the entry vanished or is a socket, left out.
struct Opened {
  UniqueFd fd;
  struct stat st {};
  bool o_path = false;
};

Result<Opened> OpenEntry(int dirfd, const std::string& name, const std::string& rel) {
  for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
    struct stat hint;
    if (fstatat(dirfd, name.c_str(), &hint, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Opened{};
      return ErrnoStatus("stat", rel);
    }
    if (S_ISSOCK(hint.st_mode)) return Opened{};
    // O_NONBLOCK: a FIFO swapped in for a file opens without waiting for a writer, and the
    // fstat below then says what it is.
    const int flags = S_ISDIR(hint.st_mode)   ? O_RDONLY | O_DIRECTORY
                      : S_ISREG(hint.st_mode) ? O_RDONLY | O_NONBLOCK | O_NOCTTY
                                              : O_PATH;
    Opened o;
    o.o_path = flags == O_PATH;
    o.fd.Reset(isolation::OpenBeneath(dirfd, name, flags));
    if (!o.fd) {
      if (errno == ENOENT) return Opened{};
      // Swapped for another type meanwhile: a symlink (ELOOP), a non-directory (ENOTDIR), a
      // socket (ENXIO).
      if (errno == ELOOP || errno == ENOTDIR || errno == ENXIO) continue;
      return ErrnoStatus("open", rel);
    }
    if (fstat(o.fd.get(), &o.st) != 0) return ErrnoStatus("stat", rel);
    if (S_ISSOCK(o.st.st_mode)) return Opened{};
    // Its data or listing needs a readable fd, which O_PATH is not: look again.
    if (o.o_path && (S_ISREG(o.st.st_mode) || S_ISDIR(o.st.st_mode))) continue;
    return o;
  }
  return Status(Code::kConflict, "open", rel, "the entry keeps changing type");
}

class TarWriter {
 public:
  TarWriter(const std::function<Status(std::string_view)>& sink, TarStreamStats* stats)
      : sink_(sink), stats_(stats) {}

  Status Walk(int root_fd);

 private:
  // A directory being listed. Its fd is closed while a child is walked when it is deeper
  // than kHeldLevels; `dev`/`ino` check that ".." gives the same directory back.
  struct Frame {
    UniqueFd fd;
    dev_t dev;
    ino_t ino;
    std::vector<std::string> names;
    size_t next = 0;
    std::string rel;  // "" for the root, else "a/b/"
  };

  Status Put(std::string_view data) { return sink_(data); }
  Status Pad(uint64_t size) {
    static const char kZeros[kBlock] = {};
    const size_t pad = (kBlock - size % kBlock) % kBlock;
    return pad ? Put(std::string_view(kZeros, pad)) : Status::Ok();
  }
  Status WriteEntry(Opened& o, const std::string& rel);
  Status WriteFileData(int fd, uint64_t size, const std::string& rel);
  Status Reopen(Frame& parent, int child_fd);

  const std::function<Status(std::string_view)>& sink_;
  TarStreamStats* stats_;
  // The first name of each inode with more links, for the ones after it.
  std::map<std::pair<dev_t, ino_t>, std::string> first_names_;
  std::string buf_;
};

// Not OpenBeneath: RESOLVE_BENEATH refuses "..". The identity check does its work instead: a
// directory moved elsewhere meanwhile has another parent, and the walk stops there.
Status TarWriter::Reopen(Frame& parent, int child_fd) {
  const std::string& rel = parent.rel;
  parent.fd.Reset(openat(child_fd, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!parent.fd) return ErrnoStatus("reopen directory", rel);
  struct stat st;
  if (fstat(parent.fd.get(), &st) != 0) return ErrnoStatus("stat", rel);
  if (st.st_dev != parent.dev || st.st_ino != parent.ino)
    return Status(Code::kConflict, "reopen directory", rel, "moved during the walk");
  return Status::Ok();
}

Status TarWriter::WriteFileData(int fd, uint64_t size, const std::string& rel) {
  buf_.resize(kChunk);
  uint64_t left = size;
  while (left > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, kChunk));
    const ssize_t r = read(fd, buf_.data(), want);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", rel);
    }
    if (r == 0) break;  // shrank since the stat: zeros below keep the header's size true
    WARREN_RETURN_IF_ERROR(Put(std::string_view(buf_.data(), static_cast<size_t>(r))));
    left -= static_cast<uint64_t>(r);
  }
  if (left > 0) {
    std::fill(buf_.begin(), buf_.end(), '\0');
    for (; left > 0; left -= std::min<uint64_t>(left, kChunk))
      WARREN_RETURN_IF_ERROR(Put(
          std::string_view(buf_.data(), static_cast<size_t>(std::min<uint64_t>(left, kChunk)))));
  }
  return Pad(size);  // what grew past `size` is not read
}

Status TarWriter::WriteEntry(Opened& o, const std::string& rel) {
  Entry e;
  e.name = rel;
  e.st = o.st;
  const mode_t fmt = o.st.st_mode & S_IFMT;
  if (fmt != S_IFDIR && o.st.st_nlink > 1) {
    auto [it, first] = first_names_.try_emplace({o.st.st_dev, o.st.st_ino}, rel);
    if (!first) {
      // The first name carried the data and the xattrs; a link is only a name.
      e.type = '1';
      e.link = it->second;
      WARREN_RETURN_IF_ERROR(Put(EncodeHeaders(e)));
      ++stats_->entries;
      return Status::Ok();
    }
  }
  switch (fmt) {
    case S_IFDIR:
      e.type = '5';
      e.name += '/';
      break;
    case S_IFREG:
      e.type = '0';
      e.size = static_cast<uint64_t>(o.st.st_size);
      break;
    case S_IFLNK: {
      e.type = '2';
      // Read through the fd: the name may point at another symlink by now.
      std::string target(static_cast<size_t>(std::max<off_t>(o.st.st_size, 0)) + 1, '\0');
      for (;;) {
        const ssize_t n = readlinkat(o.fd.get(), "", target.data(), target.size());
        if (n < 0) return ErrnoStatus("read symlink", rel);
        if (static_cast<size_t>(n) < target.size()) {
          target.resize(static_cast<size_t>(n));
          break;
        }
        target.resize(target.size() * 2);  // a filesystem that misstates the size
      }
      e.link = std::move(target);
      break;
    }
    case S_IFCHR:
      e.type = '3';
      break;
    case S_IFBLK:
      e.type = '4';
      break;
    case S_IFIFO:
      e.type = '6';
      break;
    default:
      return Invalid("an entry of unknown type", rel);
  }
  WARREN_RETURN_IF_ERROR(ReadXattrs(o.fd.get(), o.o_path, rel, &e.xattrs));
  WARREN_RETURN_IF_ERROR(Put(EncodeHeaders(e)));
  ++stats_->entries;
  if (e.type == '0') {
    WARREN_RETURN_IF_ERROR(WriteFileData(o.fd.get(), e.size, rel));
    stats_->file_bytes += e.size;
  }
  return Status::Ok();
}

// Iterative, so the depth costs heap, not stack.
Status TarWriter::Walk(int root_fd) {
  std::vector<Frame> stack;
  {
    Frame root;
    root.fd.Reset(fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
    if (!root.fd) return ErrnoStatus("dup", ".");
    struct stat st;
    if (fstat(root.fd.get(), &st) != 0) return ErrnoStatus("stat", ".");
    root.dev = st.st_dev;
    root.ino = st.st_ino;
    auto names = sys::ListDir(root.fd.get(), ".");
    if (!names.ok()) return ErrnoStatus("list directory", ".", names.status().err());
    root.names = std::move(*names);
    stack.push_back(std::move(root));
  }
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next == top.names.size()) {
      Frame done = std::move(top);
      stack.pop_back();
      if (!stack.empty() && !stack.back().fd)
        WARREN_RETURN_IF_ERROR(Reopen(stack.back(), done.fd.get()));
      continue;
    }
    const std::string& name = top.names[top.next++];
    const std::string rel = top.rel + name;
    auto opened = OpenEntry(top.fd.get(), name, rel);
    if (!opened.ok()) return opened.status();
    if (!opened->fd) continue;
    WARREN_RETURN_IF_ERROR(WriteEntry(*opened, rel));
    if (!S_ISDIR(opened->st.st_mode)) continue;

    if (stack.size() > kMaxDepth)
      return Invalid("the tree is deeper than " + std::to_string(kMaxDepth) + " levels", rel);
    auto names = sys::ListDir(opened->fd.get(), ".");
    if (!names.ok()) {
      if (names.status().err() == ENOENT) continue;  // removed after its header: empty
      return ErrnoStatus("list directory", rel, names.status().err());
    }
    if (stack.size() > kHeldLevels) top.fd.Reset();
    Frame child;
    child.fd = std::move(opened->fd);
    child.dev = opened->st.st_dev;
    child.ino = opened->st.st_ino;
    child.names = std::move(*names);
    child.rel = rel + "/";
    stack.push_back(std::move(child));  // `top` is not used after this
  }
  // The end of the archive: two zero blocks.
  static const char kEnd[2 * kBlock] = {};
  return Put(std::string_view(kEnd, sizeof kEnd));
}

}  // namespace

Status WriteTarStream(int dirfd, const std::function<Status(std::string_view)>& sink,
                      TarStreamStats* stats) {
  TarStreamStats ignored;
  TarWriter w(sink, stats ? stats : &ignored);
  return w.Walk(dirfd);
}

}  // namespace warren::agent
