// Who the OOM killer takes first: a process's oom_score_adj, written by the node (host root,
// which may lower it as well as raise it). Density ranks sandboxes by idleness with it, so a
// busy sandbox's commands are never the victim before an idle one's.
#pragma once

#include <sys/types.h>

#include "base/status.h"

namespace warren::isolation {

// -1000 (never) .. 1000 (first). kNotFound once the process has gone.
Status SetOomScoreAdj(pid_t pid, int adj);

}  // namespace warren::isolation
