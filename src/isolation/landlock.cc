#include "isolation/landlock.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "base/unique_fd.h"

namespace warren::isolation {
namespace {

// From <linux/landlock.h>; Debian 12's headers (6.1) predate the newer ABIs, so the values
// and the extended ruleset attribute are spelled out here.
constexpr uint64_t kFsExecute = 1ull << 0, kFsWriteFile = 1ull << 1, kFsReadFile = 1ull << 2,
                   kFsReadDir = 1ull << 3, kFsRemoveDir = 1ull << 4, kFsRemoveFile = 1ull << 5,
                   kFsMakeChar = 1ull << 6, kFsMakeDir = 1ull << 7, kFsMakeReg = 1ull << 8,
                   kFsMakeSock = 1ull << 9, kFsMakeFifo = 1ull << 10, kFsMakeBlock = 1ull << 11,
                   kFsMakeSym = 1ull << 12, kFsRefer = 1ull << 13, kFsTruncate = 1ull << 14,
                   kFsIoctlDev = 1ull << 15;
constexpr uint64_t kScopeAbstractUnix = 1ull << 0, kScopeSignal = 1ull << 1;
constexpr uint32_t kCreateVersion = 1u << 0;
constexpr int kRulePathBeneath = 1;

struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4
  uint64_t scoped;              // ABI 6
};

struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};

long CreateRuleset(const RulesetAttr* attr, size_t size, uint32_t flags) {
  return syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

Status AddPathRule(int ruleset, const char* path, uint64_t access) {
  UniqueFd fd(open(path, O_PATH | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open for landlock rule", path);
  PathBeneathAttr pb{access, fd.get()};
  if (syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &pb, 0) != 0)
    return ErrnoStatus("landlock_add_rule", path);
  return Status::Ok();
}

}  // namespace

int LandlockAbi() {
  long abi = CreateRuleset(nullptr, 0, kCreateVersion);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

namespace {

// The access rights this kernel's ABI handles, and the ruleset for them.
struct Ruleset {
  int abi = 0;
  uint64_t fs = 0;
  UniqueFd fd;
};

Result<Ruleset> NewRuleset(const char* what) {
  Ruleset r;
  r.abi = LandlockAbi();
  if (r.abi <= 0) return r;
  r.fs = kFsExecute | kFsWriteFile | kFsReadFile | kFsReadDir | kFsRemoveDir | kFsRemoveFile |
         kFsMakeChar | kFsMakeDir | kFsMakeReg | kFsMakeSock | kFsMakeFifo | kFsMakeBlock |
         kFsMakeSym;
  if (r.abi >= 2) r.fs |= kFsRefer;
  if (r.abi >= 3) r.fs |= kFsTruncate;
  if (r.abi >= 5) r.fs |= kFsIoctlDev;
  RulesetAttr attr{r.fs, 0, r.abi >= 6 ? (kScopeAbstractUnix | kScopeSignal) : 0};
  // Older kernels reject a larger struct than they know: pass only the fields of this ABI.
  size_t size = r.abi >= 6 ? sizeof(RulesetAttr) : r.abi >= 4 ? 16 : 8;
  r.fd.Reset(static_cast<int>(CreateRuleset(&attr, size, 0)));
  if (!r.fd) return ErrnoStatus("landlock_create_ruleset", what);
  return r;
}

}  // namespace

Result<int> ApplyLandlock(bool required) {
  Ruleset r = WARREN_TRY(NewRuleset("sandbox"));
  if (r.abi <= 0) {
    if (required) return Status(Code::kUnavailable, "landlock", "kernel", "not available");
    return 0;
  }
  // Everything under the sandbox's root, except making device nodes (and device ioctls,
  // which only /dev gets).
  uint64_t everywhere = r.fs & ~(kFsMakeChar | kFsMakeBlock | kFsIoctlDev);
  WARREN_RETURN_IF_ERROR(AddPathRule(r.fd.get(), "/", everywhere));
  if (r.abi >= 5) WARREN_RETURN_IF_ERROR(AddPathRule(r.fd.get(), "/dev", everywhere | kFsIoctlDev));
  if (syscall(SYS_landlock_restrict_self, r.fd.get(), 0) != 0)
    return ErrnoStatus("landlock_restrict_self", "sandbox");
  return r.abi;
}

}  // namespace warren::isolation
