#include "runtime/vm/guest_image.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <lzma.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "base/sha256.h"
#include "base/unique_fd.h"
#include "runtime/executable_prefix.h"

namespace warren::runtime::vm {
namespace {

std::string Canonical(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// "kernel/fs/erofs/erofs.ko" -> "erofs"
std::string ModuleName(const std::string& path) {
  std::string base = path.substr(path.rfind('/') + 1);
  for (const char* ext : {".ko.xz", ".ko.zst", ".ko.gz", ".ko"})
    if (base.size() > strlen(ext) &&
        base.compare(base.size() - strlen(ext), std::string::npos, ext) == 0) {
      base.resize(base.size() - strlen(ext));
      break;
    }
  return Canonical(base);
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ErrnoStatus("open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The newest /boot/vmlinuz-* by version order.
Result<std::string> FindKernel() {
  std::vector<std::string> found;
  if (DIR* d = opendir("/boot")) {
    while (dirent* e = readdir(d))
      if (strncmp(e->d_name, "vmlinuz-", 8) == 0)
        found.push_back(std::string("/boot/") + e->d_name);
    closedir(d);
  }
  if (found.empty())
    return NotFound("guest kernel",
                    "/boot/vmlinuz-* (install linux-image-amd64, or pass --vm-kernel)");
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return strverscmp(a.c_str(), b.c_str()) < 0;
  });
  return found.back();
}

Status WriteEntry(archive* a, const std::string& path, mode_t mode, const std::string& data = "",
                  dev_t rdev = 0) {
  std::unique_ptr<archive_entry, decltype(&archive_entry_free)> e(archive_entry_new(),
                                                                  archive_entry_free);
  archive_entry_set_pathname(e.get(), path.c_str());
  archive_entry_set_mode(e.get(), mode);
  archive_entry_set_uid(e.get(), 0);
  archive_entry_set_gid(e.get(), 0);
  archive_entry_set_size(e.get(), S_ISREG(mode) ? static_cast<la_int64_t>(data.size()) : 0);
  if (rdev) archive_entry_set_rdev(e.get(), rdev);
  archive_entry_set_nlink(e.get(), S_ISDIR(mode) ? 2 : 1);
  if (archive_write_header(a, e.get()) != ARCHIVE_OK)
    return Status(Code::kInternal, "write initramfs entry", path, archive_error_string(a));
  if (S_ISREG(mode) && !data.empty() &&
      archive_write_data(a, data.data(), data.size()) != static_cast<la_ssize_t>(data.size()))
    return Status(Code::kInternal, "write initramfs data", path, archive_error_string(a));
  return Status::Ok();
}

Status BuildInitramfs(const std::string& out_path, const std::string& agent_path,
                      const std::string& module_dir, const std::vector<std::string>& order,
                      const std::vector<std::string>& display_order) {
  std::unique_ptr<archive, decltype(&archive_write_free)> a(archive_write_new(),
                                                            archive_write_free);
  archive_write_set_format_cpio_newc(a.get());
  archive_write_add_filter_none(a.get());
  if (archive_write_open_filename(a.get(), out_path.c_str()) != ARCHIVE_OK)
    return Status(Code::kInternal, "create initramfs", out_path, archive_error_string(a.get()));
  for (const char* d :
       {"dev", "proc", "sys", "run", "run/warren", "run/warren/staging", "lib", "lib/modules"})
    WARREN_RETURN_IF_ERROR(WriteEntry(a.get(), d, S_IFDIR | 0755));
  // The kernel opens /dev/console for init's stdio before init mounts devtmpfs.
  WARREN_RETURN_IF_ERROR(WriteEntry(a.get(), "dev/console", S_IFCHR | 0600, "", makedev(5, 1)));
  // Only what an exec loads: the guest keeps its initramfs in RAM for good, and the build's
  // agent carries 27 MiB of symbols and debug information after its segments.
  std::string agent = WARREN_TRY(ReadFile(agent_path));
  agent.resize(ExecutablePrefixBytes(agent));
  DropSectionHeaders(agent.data(), agent.size());
  WARREN_RETURN_IF_ERROR(WriteEntry(a.get(), "init", S_IFREG | 0755, agent));
  for (const auto& [mods, list_name] :
       {std::pair{&order, "warren.order"}, std::pair{&display_order, "warren-display.order"}}) {
    std::string list;
    for (const auto& rel : *mods) {
      std::string base = rel.substr(rel.rfind('/') + 1);
      WARREN_RETURN_IF_ERROR(WriteEntry(a.get(), "lib/modules/" + base, S_IFREG | 0644,
                                        WARREN_TRY(ReadFile(module_dir + "/" + rel))));
      list += base + "\n";
    }
    WARREN_RETURN_IF_ERROR(
        WriteEntry(a.get(), std::string("lib/modules/") + list_name, S_IFREG | 0644, list));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK)
    return Status(Code::kInternal, "finish initramfs", out_path, archive_error_string(a.get()));
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& GuestModules() {
  static const std::vector<std::string> kModules = {
      // virtio over MMIO (microvm) and PCI (q35, backend vm)
      "virtio_mmio", "virtio_pci", "virtio_blk", "virtio_console", "virtio_net", "virtio_rng",
      // libcrc32c (EROFS needs it) asks the crypto API for "crc32c": a soft dependency.
      "crc32c_generic", "erofs", "overlay"};
  return kModules;
}

const std::vector<std::string>& GuestDisplayModules() {
  // A VM's screen (backend vm with a display): QEMU's bochs-display, whose DRM driver gives
  // the guest /dev/dri/card0 and a framebuffer, and virtio tablet and keyboard as evdev
  // devices for its X server.
  static const std::vector<std::string> kModules = {"bochs", "virtio_input", "evdev"};
  return kModules;
}

Result<std::vector<std::string>> ModuleLoadOrder(const std::vector<std::string>& wanted,
                                                 const std::string& modules_dep,
                                                 const std::string& modules_builtin) {
  std::map<std::string, std::pair<std::string, std::vector<std::string>>>
      dep;  // name -> (path, deps)
  std::istringstream in(modules_dep);
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string path = line.substr(0, colon);
    std::vector<std::string> deps;
    std::istringstream rest(line.substr(colon + 1));
    for (std::string d; rest >> d;) deps.push_back(ModuleName(d));
    dep[ModuleName(path)] = {path, std::move(deps)};
  }
  std::set<std::string> builtin;
  std::istringstream b(modules_builtin);
  for (std::string line; std::getline(b, line);)
    if (!line.empty()) builtin.insert(ModuleName(line));

  std::vector<std::string> order;
  std::set<std::string> done, visiting;
  std::function<Status(const std::string&)> visit = [&](const std::string& raw) -> Status {
    const std::string name = Canonical(raw);
    if (done.count(name) || builtin.count(name)) return Status::Ok();
    auto it = dep.find(name);
    if (it == dep.end()) return NotFound("kernel module", name);
    if (!visiting.insert(name).second) return Invalid("dependency cycle", name);
    for (const auto& d : it->second.second) WARREN_RETURN_IF_ERROR(visit(d));
    visiting.erase(name);
    done.insert(name);
    order.push_back(it->second.first);
    return Status::Ok();
  };
  for (const auto& w : wanted) WARREN_RETURN_IF_ERROR(visit(w));
  return order;
}

Status ExtractVmlinux(const std::string& bzimage, const std::string& out_path) {
  std::string in = WARREN_TRY(ReadFile(bzimage));
  static const char kXzMagic[] = {'\xFD', '7', 'z', 'X', 'Z', '\0'};
  size_t at = in.find(std::string_view(kXzMagic, sizeof kXzMagic));
  if (at == std::string::npos)
    return Status(Code::kInvalid, "extract vmlinux", bzimage,
                  "no xz payload (only xz-compressed kernels are supported)");
  lzma_stream s = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&s, UINT64_MAX, 0) != LZMA_OK)
    return Status(Code::kInternal, "extract vmlinux", bzimage, "lzma_stream_decoder failed");
  std::unique_ptr<lzma_stream, decltype(&lzma_end)> guard(&s, lzma_end);
  const std::string tmp = out_path + ".tmp" + std::to_string(getpid());
  UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!out) return ErrnoStatus("create", tmp);
  s.next_in = reinterpret_cast<const uint8_t*>(in.data() + at);
  s.avail_in = in.size() - at;
  std::string buf(1 << 20, '\0');
  for (;;) {
    s.next_out = reinterpret_cast<uint8_t*>(buf.data());
    s.avail_out = buf.size();
    lzma_ret r = lzma_code(&s, LZMA_FINISH);
    size_t n = buf.size() - s.avail_out;
    if (n && write(out.get(), buf.data(), n) != static_cast<ssize_t>(n))
      return ErrnoStatus("write", tmp);
    if (r == LZMA_STREAM_END) break;
    if (r != LZMA_OK) {
      unlink(tmp.c_str());
      return Status(Code::kInvalid, "extract vmlinux", bzimage, "xz error " + std::to_string(r));
    }
  }
  if (fsync(out.get()) != 0) return ErrnoStatus("fsync", tmp);
  if (rename(tmp.c_str(), out_path.c_str()) != 0) return ErrnoStatus("rename", out_path);
  return Status::Ok();
}

Result<GuestImage> PrepareGuestImage(const std::string& cache_dir, const std::string& kernel,
                                     const std::string& agent_path,
                                     const std::string& modules_root) {
  const std::string vmlinuz = kernel.empty() ? WARREN_TRY(FindKernel()) : kernel;
  const std::string base = vmlinuz.substr(vmlinuz.rfind('/') + 1);
  if (base.rfind("vmlinuz-", 0) != 0)
    return Invalid(
        "guest kernel must be named vmlinuz-<release> (its modules are found by release)", vmlinuz);
  GuestImage g;
  g.release = base.substr(8);
  g.bzimage_path = vmlinuz;
  const std::string mod_dir = modules_root + "/" + g.release;
  if (mkdir(cache_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", cache_dir);

  struct stat ks;
  if (stat(vmlinuz.c_str(), &ks) != 0) return ErrnoStatus("stat", vmlinuz);
  const std::string kernel_key = Sha256Hex(vmlinuz + ":" + std::to_string(ks.st_size) + ":" +
                                           std::to_string(ks.st_mtim.tv_sec))
                                     .substr(0, 16);
  g.kernel_path = cache_dir + "/vmlinux-" + g.release + "-" + kernel_key;
  if (access(g.kernel_path.c_str(), R_OK) != 0)
    WARREN_RETURN_IF_ERROR(ExtractVmlinux(vmlinuz, g.kernel_path));

  auto order =
      WARREN_TRY(ModuleLoadOrder(GuestModules(), WARREN_TRY(ReadFile(mod_dir + "/modules.dep")),
                                 WARREN_TRY(ReadFile(mod_dir + "/modules.builtin"))));
  // The display's modules load only where a display device is (agent/vm_init.cc): not
  // one of them is in the base order again.
  // A kernel without them still runs every VM; only a VM's screen would find no driver.
  std::vector<std::string> display_order;
  auto display =
      ModuleLoadOrder(GuestDisplayModules(), WARREN_TRY(ReadFile(mod_dir + "/modules.dep")),
                      WARREN_TRY(ReadFile(mod_dir + "/modules.builtin")));
  if (!display.ok())
    spdlog::warn("microvm: the guest kernel lacks a display module ({}): VM screens stay dark",
                 display.status().ToString());
  for (auto& m : display.ok() ? *display : std::vector<std::string>{})
    if (std::find(order.begin(), order.end(), m) == order.end())
      display_order.push_back(std::move(m));
  const std::string agent_sum = WARREN_TRY(Sha256File(agent_path));
  std::string recipe = "v4\n" + kernel_key + "\n" + agent_sum + "\n";
  for (const auto& m : order) recipe += m + "\n";
  recipe += "display:\n";
  for (const auto& m : display_order) recipe += m + "\n";
  const std::string initrd_key = Sha256Hex(recipe).substr(0, 16);
  g.initramfs_path = cache_dir + "/initramfs-" + initrd_key + ".cpio";
  if (access(g.initramfs_path.c_str(), R_OK) != 0) {
    const std::string tmp = g.initramfs_path + ".tmp" + std::to_string(getpid());
    WARREN_RETURN_IF_ERROR(BuildInitramfs(tmp, agent_path, mod_dir, order, display_order));
    if (rename(tmp.c_str(), g.initramfs_path.c_str()) != 0)
      return ErrnoStatus("rename", g.initramfs_path);
  }
  g.digest = Sha256Hex(g.kernel_path + "\n" + initrd_key).substr(0, 16);
  return g;
}

}  // namespace warren::runtime::vm
