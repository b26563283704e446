#include "cli/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

namespace warren::cli {

RawTerminal::RawTerminal(int fd) : fd_(fd) {
  termios t;
  if (!isatty(fd) || tcgetattr(fd, &t) != 0) return;
  saved_ = t;
  // Output post-processing off too: the remote terminal already did it, and a curses
  // program's bare \n (cursor down) must not become \r\n here.
  cfmakeraw(&t);
  if (tcsetattr(fd, TCSADRAIN, &t) != 0) saved_.reset();
}

RawTerminal::~RawTerminal() {
  if (saved_) tcsetattr(fd_, TCSADRAIN, &*saved_);
}

std::optional<TermSize> TerminalSizeOf(int fd) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) return std::nullopt;
  return TermSize{ws.ws_row, ws.ws_col};
}

}  // namespace warren::cli
