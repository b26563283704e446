// A desktop sandbox's screen (issue 29): its size, and the input steps a client's actions
// come down to (parsed and checked by the API server: server/input_actions.h; the node hands them
// to the agent, agent/desktop_messages.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace warren::agent {

struct DisplaySize {
  static constexpr uint16_t kMin = 64, kMaxWidth = 3840, kMaxHeight = 2160;
  static constexpr bool Valid(uint64_t w, uint64_t h) {
    return w >= kMin && w <= kMaxWidth && h >= kMin && h <= kMaxHeight;
  }
  uint16_t width = 1280;
  uint16_t height = 800;
};

// One primitive of synthetic input, as the X server's XTEST takes it.
struct InputStep {
  enum class Kind { kMove, kButton, kKeys, kText, kWait };
  Kind kind = Kind::kMove;
  int x = 0, y = 0;               // kMove: where the pointer goes (absolute)
  int button = 1;                 // kButton: 1 left, 2 middle, 3 right, 4-7 the wheel
  bool down = true;               // kButton: press or release
  std::vector<uint32_t> keysyms;  // kKeys: pressed in order, released in reverse (a chord)
  std::u32string text;            // kText: typed one character after another
  uint32_t ms = 0;                // kWait
};

}  // namespace warren::agent
