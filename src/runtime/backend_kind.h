// The kinds of sandbox backend, in one place: their names on the wire and what each can
// promise. The API validates against these traits and the node picks its backend by kind
// (LocalNode::BackendFor); nothing else compares backend names.
#pragma once

#include <optional>
#include <string_view>

namespace warren::runtime {

enum class BackendKind {
  kFncall,     // stateless: each exec a fresh worker of a runner (node/fncall)
  kContainer,  // namespaces, idmapped EROFS layers, overlayfs, cgroups
  kMicrovm,    // a QEMU guest with the agent as its init
  kVm,         // a QEMU guest booting the image's own init (a whole machine)
};
inline constexpr BackendKind kAllBackendKinds[] = {BackendKind::kContainer, BackendKind::kFncall,
                                                   BackendKind::kMicrovm, BackendKind::kVm};

inline const char* BackendName(BackendKind k) {
  switch (k) {
    case BackendKind::kFncall:
      return "fncall";
    case BackendKind::kContainer:
      return "container";
    case BackendKind::kMicrovm:
      return "microvm";
    case BackendKind::kVm:
      return "vm";
  }
  return "container";
}

inline std::optional<BackendKind> ParseBackendKind(std::string_view name) {
  for (BackendKind k : kAllBackendKinds)
    if (name == BackendName(k)) return k;
  return std::nullopt;
}

struct BackendTraits {
  bool is_vm;         // a QEMU guest (microvm, vm)
  bool full_os;       // the image's own init runs (vm)
  bool keeps_files;   // files persist between execs (not fncall)
  bool guards_tools;  // tool layers and filesystem policies hold against its root
};

inline BackendTraits TraitsOf(BackendKind k) {
  switch (k) {
    case BackendKind::kFncall:
      return {false, false, false, false};
    case BackendKind::kContainer:
      return {false, false, true, true};
    case BackendKind::kMicrovm:
      return {true, false, true, true};
    // Root of a whole machine keeps every capability: it can unmount a guard.
    case BackendKind::kVm:
      return {true, true, true, false};
  }
  return {};
}

}  // namespace warren::runtime
