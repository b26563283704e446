// The keys of a VM's keyboard as QEMU names them (QKeyCode, for QMP's input-send-event): an
// X keysym or a typed character comes down to a key and whether Shift goes with it, on the US
// layout the guest's X server starts with. A machine has no key for a keysym outside that
// layout (an accented letter, a symbol of another layout): those are refused, not guessed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace warren::runtime::vm {

struct QemuKey {
  std::string qcode;   // "a", "ret", "ctrl", "f5"
  bool shift = false;  // pressed with Shift (a capital, "!", "{")
};

// A keysym (X11's keysymdef.h: Latin-1 values for printable ASCII, 0xff.. for the rest).
std::optional<QemuKey> KeyForKeysym(uint32_t keysym);
// A character of text to type ('\n' is Return, '\t' is Tab).
std::optional<QemuKey> KeyForChar(char32_t c);

}  // namespace warren::runtime::vm
