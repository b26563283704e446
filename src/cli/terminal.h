// The local terminal of `warren exec -it`: raw mode while the remote command runs, and its
// size (which the remote terminal follows).
#pragma once

#include <termios.h>

#include <cstdint>
#include <optional>

namespace warren::cli {

// Puts `fd` (a terminal) in raw mode for its lifetime, as ssh and docker do: every key, ^C
// included, goes to the remote terminal, whose line discipline gives it its meaning there.
// The old mode comes back when this goes, however the command ends.
class RawTerminal {
 public:
  explicit RawTerminal(int fd);
  ~RawTerminal();
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  bool active() const { return saved_.has_value(); }

 private:
  int fd_;
  std::optional<termios> saved_;
};

struct TermSize {
  uint16_t rows = 24;
  uint16_t cols = 80;
};
// The size of the terminal on `fd`, or nothing when it is not one.
std::optional<TermSize> TerminalSizeOf(int fd);

}  // namespace warren::cli
