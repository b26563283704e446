// A whole VM's screen through QEMU itself (backend vm with a display): the guest draws on a
// bochs-display, a screenshot is QMP's `screendump` (PPM, made PNG here) and input is
// `input-send-event` on a virtio tablet and keyboard. Nothing inside the machine takes part,
// so it works for any guest that drives those devices.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/display.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "runtime/vm/qmp_client.h"

namespace warren::runtime::vm {

class QmpScreen {
 public:
  explicit QmpScreen(agent::DisplaySize size) : size_(size) {}
  // The devices a VM with this screen is started with (QEMU arguments after -device).
  static std::vector<std::string> Devices(agent::DisplaySize size);
  // The display device's video memory (QEMU's, counted in its cgroup's limit).
  static uint64_t VideoMemoryBytes(agent::DisplaySize size);

  // QEMU writes the screen into a memfd of ours, handed over once with `add-fd` (QEMU opens
  // no path of ours: it writes to /dev/fdset/N), as PPM, which becomes a PNG here.
  Result<std::string> Screenshot(QmpClient& qmp);
  // Input is planned first, then sent batch by batch: each batch one `input-send-event` (a
  // move is both axes at once; a chord's presses, then its releases in reverse; text key by
  // key, press and release apart, with Shift where the US layout needs it), or a wait
  // (`events` null) the caller sleeps through without holding anything. A character or
  // keysym with no key there is kInvalid from Plan: nothing is sent.
  struct Batch {
    nlohmann::json events;
    uint32_t wait_ms = 0;
  };
  Result<std::vector<Batch>> Plan(const std::vector<agent::InputStep>& steps) const;
  static Status Send(QmpClient& qmp, const Batch& batch);

 private:
  Status OpenSink(QmpClient& qmp);

  agent::DisplaySize size_;  // what the screen shows: the last screenshot's size
  UniqueFd png_;             // the memfd (a PPM), read here
  UniqueFd sink_;            // the same memfd opened write-only: QEMU's copy shares its offset
  int fdset_ = -1;
};

}  // namespace warren::runtime::vm
