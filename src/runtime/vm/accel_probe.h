// Which accelerator QEMU should use here: KVM where it really runs guests at speed, TCG
// (QEMU's own translator) where it does not.
//
// /dev/kvm existing is not enough: on some hosts (this build machine is a PVM guest) KVM
// accepts a VM and runs its code ~1000x slower than native. So the probe runs a guest: a
// few real-mode instructions counting down a register millions of times, then HLT, in a
// child process with a deadline. Done once at node start, reported in /v1/nodes and logs.
#pragma once

#include <string>

namespace warren::runtime::vm {

struct AccelChoice {
  std::string accel;        // "kvm" or "tcg"
  std::string reason;       // what the probe saw
  double kvm_loop_ms = -1;  // the guest loop under KVM (-1: did not finish)
  double native_loop_ms = -1;
};

// `force`: "kvm", "tcg" or "" / "auto" to probe.
AccelChoice ChooseAccel(const std::string& force = "");

}  // namespace warren::runtime::vm
