// A seam under the create path for failure injection. Each step of making a sandbox asks,
// just before it runs, whether to fail; tests answer "here" for one step at a time and then
// check that the failed create left nothing behind (cgroups, mounts, fds, uid slots, network
// namespaces, run files). Production passes no CreateFaults: the checks cost a null test.
#pragma once

#include <string>

#include "base/status.h"

namespace warren::runtime {

enum class CreateStep {
  kNetwork,         // (node) a network namespace from the pool, attached to the bridge
  kIdentity,        // a uid range of our own
  kLayers,          // the layer blobs mounted
  kCgroup,          // the sandbox's cgroups with their limits
  kChannels,        // the control socket and the start pipe
  kClone,           // clone3 into new namespaces and the cgroup
  kIdMaps,          // uid/gid maps written, v1 cgroups attached
  kIdmappedMounts,  // idmapped clones of the layer mounts
  kSetup,           // the agent released and sent its setup
  kHandshake,       // the agent's ready
  kNetworkReady,    // (node) the sandbox's address and firewall rules in place
};
inline constexpr CreateStep kAllCreateSteps[] = {
    CreateStep::kNetwork,   CreateStep::kIdentity,       CreateStep::kLayers,
    CreateStep::kCgroup,    CreateStep::kChannels,       CreateStep::kClone,
    CreateStep::kIdMaps,    CreateStep::kIdmappedMounts, CreateStep::kSetup,
    CreateStep::kHandshake, CreateStep::kNetworkReady};

inline const char* CreateStepName(CreateStep s) {
  switch (s) {
    case CreateStep::kNetwork:
      return "network";
    case CreateStep::kIdentity:
      return "identity";
    case CreateStep::kLayers:
      return "layers";
    case CreateStep::kCgroup:
      return "cgroup";
    case CreateStep::kChannels:
      return "channels";
    case CreateStep::kClone:
      return "clone";
    case CreateStep::kIdMaps:
      return "id_maps";
    case CreateStep::kIdmappedMounts:
      return "idmapped_mounts";
    case CreateStep::kSetup:
      return "setup";
    case CreateStep::kHandshake:
      return "handshake";
    case CreateStep::kNetworkReady:
      return "network_ready";
  }
  return "?";
}

class CreateFaults {
 public:
  virtual ~CreateFaults() = default;
  // Called before `step` of creating sandbox `id`; a status that is not ok fails the create
  // there, as if the step itself had failed.
  virtual Status Before(CreateStep step, const std::string& id) = 0;
};

// The check each step makes (no seam: never fails).
inline Status CheckFault(CreateFaults* faults, CreateStep step, const std::string& id) {
  return faults ? faults->Before(step, id) : Status::Ok();
}

}  // namespace warren::runtime
