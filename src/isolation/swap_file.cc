#include "isolation/swap_file.h"

#include <fcntl.h>
#include <sys/swap.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "base/subprocess.h"
#include "base/unique_fd.h"

namespace warren::isolation {
namespace {

// The swap header's volume name (struct swap_header: 1024 boot bytes, then version,
// last_page and nr_badpages as u32, a 16-byte uuid, then the 16-byte name).
constexpr off_t kLabelOffset = 1024 + 3 * 4 + 16;
constexpr size_t kLabelBytes = 16;  // 15 and a NUL

std::string LabelFor(const std::string& state_file) {
  // "warren:" and the FNV-1a hash of the state file's name (<parent>.swap) in hex: unique per
  // node on a host, and within the 15 characters a swap label holds.
  uint32_t h = 2166136261u;
  for (unsigned char c : state_file.substr(state_file.rfind('/') + 1)) h = (h ^ c) * 16777619u;
  char hex[9];
  snprintf(hex, sizeof hex, "%08x", h);
  return std::string("warren:") + hex;
}

// Whether `path` is a swap file an earlier run of this node made and left off (the host
// restarted, and /run with the state file went): such a file is remade, any other refused.
bool IsOursLeftOff(const std::string& path, const std::string& label) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  char name[kLabelBytes + 1] = {};
  if (!fd.valid() || pread(fd.get(), name, kLabelBytes, kLabelOffset) != kLabelBytes) return false;
  return name == label && !IsActiveSwap(path);
}

}  // namespace

Result<std::unique_ptr<SwapFile>> SwapFile::Create(const std::string& path, uint64_t bytes,
                                                   const std::string& state_file) {
  if (path.empty() || path[0] != '/') return Invalid("swap file", "wants an absolute path");
  // As /proc/swaps will name it (symlinks and .. resolved), or nothing would find it there
  // and Release would delete a file still in use as swap.
  const size_t slash = path.rfind('/');
  char dir[PATH_MAX];
  if (!realpath(slash == 0 ? "/" : path.substr(0, slash).c_str(), dir))
    return ErrnoStatus("resolve swap file directory", path.substr(0, slash));
  return CreateAt((std::string(dir) == "/" ? "" : std::string(dir)) + path.substr(slash), bytes,
                  state_file);
}

Result<std::unique_ptr<SwapFile>> SwapFile::CreateAt(const std::string& path, uint64_t bytes,
                                                     const std::string& state_file) {
  const std::string label = LabelFor(state_file);
  if (IsOursLeftOff(path, label)) unlink(path.c_str());
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    if (errno == EEXIST)
      return Status(Code::kConflict, "create swap file", path,
                    "it exists and is not this node's: the node makes its own");
    return ErrnoStatus("create swap file", path);
  }
  std::unique_ptr<SwapFile> f(new SwapFile);
  f->owned_ = true;  // from here on Release (or the destructor) deletes it
  f->path_ = path;
  // Every block allocated now: swap may not have holes, and a full disk fails here, not when
  // a sandbox's page is written out.
  if (int err = posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); err != 0)
    return ErrnoStatus("allocate swap file", path, err);
  fd.Reset();
  auto mk = WARREN_TRY(RunProgram({"mkswap", "-q", "-L", label, path}));
  if (mk.exit_code != 0) return Status(Code::kInternal, "mkswap", path, mk.output);
  const int flags =
      SWAP_FLAG_PREFER | ((kNodeSwapPriority << SWAP_FLAG_PRIO_SHIFT) & SWAP_FLAG_PRIO_MASK);
  if (swapon(path.c_str(), flags) != 0) {
    if (errno == EINVAL)
      return Status(Code::kInvalid, "swapon", path,
                    "the file system cannot hold a swap file (ext4 and xfs can)");
    return ErrnoStatus("swapon", path);
  }
  f->state_file_ = state_file;
  std::ofstream out(state_file, std::ios::trunc);
  out << path << "\n";
  if (!out.flush()) return ErrnoStatus("write", state_file);
  return f;
}

std::unique_ptr<SwapFile> SwapFile::Adopt(const std::string& path, const std::string& state_file) {
  std::unique_ptr<SwapFile> f(new SwapFile);
  f->owned_ = true;
  f->path_ = path;
  f->state_file_ = state_file;
  return f;
}

Status SwapFile::Release() {
  if (!owned_) return Status::Ok();
  owned_ = false;
  if (IsActiveSwap(path_) && swapoff(path_.c_str()) != 0)
    return ErrnoStatus("swapoff", path_);  // still on and named: the next run adopts it
  Status st;
  if (unlink(path_.c_str()) != 0 && errno != ENOENT) st = ErrnoStatus("delete swap file", path_);
  if (!state_file_.empty()) unlink(state_file_.c_str());
  return st;
}

SwapStats SwapFile::Stats() const {
  SwapStats s;
  if (!owned_) return s;
  IsActiveSwap(path_, &s);
  s.compressed_bytes = s.used_bytes;  // a file stores pages as they are
  return s;
}

}  // namespace warren::isolation
