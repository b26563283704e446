// What a microVM boots: the guest kernel and an initramfs with warren-agent as /init.
//
// The kernel is the host distribution's (Debian's linux-image-amd64), used uncompressed: QEMU
// boots a vmlinux through its PVH entry point, which under TCG is ~2x faster than having the
// guest decompress a bzImage. The initramfs holds the agent, the kernel modules a sandbox
// needs, in load order (agent/vm_init.h), /dev/console and the directories the agent mounts
// on. Both are made once per (kernel, agent) and cached by content in a directory of the node.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace warren::runtime::vm {

struct GuestImage {
  std::string release;         // kernel release, e.g. 6.1.0-56-amd64
  std::string kernel_path;     // uncompressed vmlinux
  std::string bzimage_path;    // the compressed original
  std::string initramfs_path;  // newc cpio, uncompressed
  std::string digest;          // of both: what a saved template VM depends on
};

// Modules every microVM loads (their dependencies come along from modules.dep).
const std::vector<std::string>& GuestModules();
// Loaded besides, by the guest, only where a display device is (backend vm with a display).
const std::vector<std::string>& GuestDisplayModules();

// `kernel`: a vmlinuz path, or "" for the newest /boot/vmlinuz-*. Modules come from
// `modules_root`/<release> (normally /lib/modules).
Result<GuestImage> PrepareGuestImage(const std::string& cache_dir, const std::string& kernel,
                                     const std::string& agent_path,
                                     const std::string& modules_root = "/lib/modules");

// Load order for `wanted` (module names, '-' or '_') from a modules.dep and modules.builtin
// text: each module after its dependencies, built-in ones left out. Paths are relative to the
// release's module directory.
Result<std::vector<std::string>> ModuleLoadOrder(const std::vector<std::string>& wanted,
                                                 const std::string& modules_dep,
                                                 const std::string& modules_builtin);

// Decompresses the xz payload of a bzImage into an ELF vmlinux.
Status ExtractVmlinux(const std::string& bzimage, const std::string& out_path);

}  // namespace warren::runtime::vm
