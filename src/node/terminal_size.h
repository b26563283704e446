// The size of an exec's terminal (ExecSpec::tty), in character cells, as TIOCSWINSZ takes it.
#pragma once

#include <cstdint>

namespace warren::node {

struct TerminalSize {
  // Bounds for what a client may ask: wider than any screen, small enough that a program
  // sizing a buffer by rows x cols stays sane.
  static constexpr uint16_t kMax = 1000;
  uint16_t rows = 24;
  uint16_t cols = 80;
};

}  // namespace warren::node
