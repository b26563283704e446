// Runs a helper program (e.g. mkfs.erofs) off the hot path: argv only, never a shell.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace warren {

struct SubprocessResult {
  int exit_code = -1;  // -1 if killed by a signal
  std::string output;  // stdout+stderr, capped
};

// posix_spawn (safe from a multithreaded daemon), waits for it, captures up to 64 KiB of
// combined output. Fails only if the program cannot be started.
// `extra_env` ("K=V") is added to the daemon's environment.
Result<SubprocessResult> RunProgram(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& extra_env = {});

// The same, but the program's output goes to our stderr as it runs (progress of long builds);
// returns the exit code (-1 if killed by a signal).
Result<int> RunProgramShowingOutput(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& extra_env = {});

}  // namespace warren
