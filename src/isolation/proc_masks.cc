#include "isolation/proc_masks.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include "sys/mount_api.h"

namespace warren::isolation {
namespace {

// As runc's default maskedPaths and readonlyPaths.
constexpr const char* kMaskedFiles[] = {
    "/proc/kcore",       "/proc/keys",        "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/proc/kallsyms",      "/proc/config.gz",
    "/proc/interrupts",  "/proc/kmsg",        "/proc/sysrq-trigger", "/proc/vmallocinfo",
};
constexpr const char* kMaskedDirs[] = {"/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/driver"};
constexpr const char* kReadOnly[] = {"/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs"};
// runc's masked sysfs paths: the firmware's tables (ACPI, DMI with serial numbers, EFI
// variables) and the power-capping counters (RAPL energy readings are a side channel on
// what other tenants compute, CVE-2020-8694).
constexpr const char* kMaskedSysDirs[] = {"/sys/firmware", "/sys/devices/virtual/powercap"};

Status BindReadOnly(const std::string& path) {
  if (mount(path.c_str(), path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    return ErrnoStatus("bind", path);
  if (mount(nullptr, path.c_str(), nullptr,
            MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return ErrnoStatus("remount read-only", path);
  return Status::Ok();
}

bool Exists(const std::string& p, bool* is_dir) {
  struct stat sb;
  if (lstat(p.c_str(), &sb) != 0) return false;
  *is_dir = S_ISDIR(sb.st_mode);
  return true;
}

// An empty read-only directory of the scratch tmpfs over `path`, if it is a directory.
Status MaskDir(const std::string& path, const std::string& scratch) {
  bool dir = false;
  if (!Exists(path, &dir) || !dir) return Status::Ok();
  const std::string empty = scratch + "/empty";
  if (mkdir(empty.c_str(), 0555) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", empty);
  if (mount(empty.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return ErrnoStatus("mask", path);
  if (mount(nullptr, path.c_str(), nullptr,
            MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return ErrnoStatus("remount read-only", path);
  return Status::Ok();
}

}  // namespace

Status MountProc(const std::string& root, const std::string& scratch) {
  const std::string proc = root + "/proc";
  if (mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    return ErrnoStatus("mount proc", proc);
  bool dir = false;
  for (const char* p : kReadOnly) {
    std::string path = root + p;
    if (Exists(path, &dir)) WARREN_RETURN_IF_ERROR(BindReadOnly(path));
  }
  for (const char* p : kMaskedFiles) {
    std::string path = root + p;
    if (!Exists(path, &dir) || dir) continue;
    if (mount("/dev/null", path.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return ErrnoStatus("mask", path);
  }
  for (const char* p : kMaskedDirs) WARREN_RETURN_IF_ERROR(MaskDir(root + p, scratch));
  return Status::Ok();
}

Status MountSys(const std::string& root, int sysfs_fd, const std::string& scratch) {
  const std::string sys = root + "/sys";
  if (sysfs_fd >= 0) {
    // A sysfs the node made for our network namespace (we may not mount one there ourselves).
    WARREN_RETURN_IF_ERROR(sys::MoveMountTo(sysfs_fd, sys));
  } else if (mount("sysfs", sys.c_str(), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   nullptr) != 0) {
    // sysfs needs a fully visible host sysfs; where it is not, an empty read-only tmpfs keeps
    // programs that probe /sys working without exposing anything.
    if (mount("tmpfs", sys.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=0") != 0)
      return ErrnoStatus("mount sysfs", sys);
  }
  for (const char* p : kMaskedSysDirs) WARREN_RETURN_IF_ERROR(MaskDir(root + p, scratch));
  return Status::Ok();
}

}  // namespace warren::isolation
