// A whole VM's screen through QEMU itself (backend vm with a display): the guest draws on a
// bochs-display, a screenshot is QMP's `screendump` in PNG and input is `input-send-event` on
// a virtio tablet and keyboard. Nothing inside the machine takes part, so it works for any
// guest that drives those devices.
#pragma once

#include <mutex>
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

  // QEMU writes the PNG into a memfd of ours, handed over once with `add-fd` (QEMU opens no
  // path of ours: it writes to /dev/fdset/N).
  Result<std::string> Screenshot(QmpClient& qmp);
  // Each step is one `input-send-event` (a move is both axes at once; a chord presses its
  // keys in order and releases them in reverse; text is typed key by key with Shift where the
  // US layout needs it). A character or keysym with no key there is kInvalid, before anything
  // is sent.
  Status Input(QmpClient& qmp, const std::vector<agent::InputStep>& steps);

 private:
  Status OpenSink(QmpClient& qmp);

  const agent::DisplaySize size_;
  UniqueFd png_;   // the memfd, read here
  UniqueFd sink_;  // the same memfd opened write-only: QEMU's copy shares its offset
  int fdset_ = -1;
};

}  // namespace warren::runtime::vm
