// Pages a process's memory out to swap now (process_madvise(2) with MADV_PAGEOUT), without
// lowering any limit: a hibernated sandbox gives back everything its processes hold, and a
// page comes back from swap when touched. Needs CAP_SYS_NICE and ptrace read access (the node
// is host root).
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "base/status.h"

namespace warren::isolation {

struct PageOutResult {
  uint64_t advised_bytes = 0;  // the mappings' sizes handed to the kernel
  int mappings = 0;
};

// Every private mapping of process `pid` (anonymous or file-backed; its stack and heap
// included), one iovec each so that one the kernel refuses (locked, device memory) does not
// stop the rest. kNotFound once the process has gone.
Result<PageOutResult> PageOutProcess(pid_t pid);

}  // namespace warren::isolation
