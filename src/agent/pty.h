// A pseudo-terminal for a command (an exec with `tty`), made in the sandbox's own devpts: the
// agent runs inside the sandbox's mount namespace, so /dev/ptmx is the sandbox's, never the
// host's, and the pair's number means nothing outside it.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::agent {

struct PtyPair {
  UniqueFd master;  // the agent's end: it reads the terminal's output and writes its input
  UniqueFd slave;   // the command's stdin, stdout and stderr (O_CLOEXEC: the child dup2s it)
};

// Opens a pair sized rows x cols, both ends O_CLOEXEC and O_NOCTTY (the agent never takes a
// controlling terminal; the command's child makes the slave its own after setsid()).
Result<PtyPair> OpenPty(uint16_t rows, uint16_t cols);

// A new size; the kernel sends SIGWINCH to the terminal's foreground process group.
Status ResizePty(int master, uint16_t rows, uint16_t cols);

}  // namespace warren::agent
