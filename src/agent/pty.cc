#include "agent/pty.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>

namespace warren::agent {

Result<PtyPair> OpenPty(uint16_t rows, uint16_t cols) {
  PtyPair p;
  p.master.Reset(open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.master) return ErrnoStatus("open", "/dev/ptmx");
  int unlock = 0;
  if (ioctl(p.master.get(), TIOCSPTLCK, &unlock) != 0) return ErrnoStatus("unlock pty", "ptmx");
  // The slave through the master (Linux 4.13+), not by the name /dev/pts/N: no path lookup
  // that something in the sandbox could have swapped under us.
  p.slave.Reset(ioctl(p.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.slave) return ErrnoStatus("open pty peer", "ptmx");
  WARREN_RETURN_IF_ERROR(ResizePty(p.master.get(), rows, cols));
  return p;
}

Status ResizePty(int master, uint16_t rows, uint16_t cols) {
  winsize ws{};
  ws.ws_row = rows;
  ws.ws_col = cols;
  if (ioctl(master, TIOCSWINSZ, &ws) != 0) return ErrnoStatus("resize pty", "ptmx");
  return Status::Ok();
}

}  // namespace warren::agent
