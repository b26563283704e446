// The X server of a whole VM with a screen (backend vm): Xorg on the machine's display device
// (QEMU's bochs-display, /dev/dri/card0) with its virtio tablet and keyboard, configured
// explicitly (the evdev input driver) so it needs neither udev nor a login session (the agent may
// be the machine's init) and never blanks the screen an agent is looking at.
#pragma once

#include <string>

#include "agent/display.h"
#include "base/status.h"

namespace warren::agent {

// /dev/input/eventN of the input device whose name contains `name_part` ("Tablet",
// "Keyboard"), waiting up to `wait_ms` for it to appear.
Result<std::string> FindInputDevice(const std::string& name_part, int wait_ms);

// xorg.conf for a screen of `size` on /dev/dri/card0 with these two devices.
std::string XorgConfig(DisplaySize size, const std::string& tablet, const std::string& keyboard);

}  // namespace warren::agent
