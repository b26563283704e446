// Brings up `lo` in the sandbox's own network namespace (network mode "none"). Child half.
#pragma once

#include "base/status.h"

namespace warren::isolation {

Status BringUpLoopback();

}  // namespace warren::isolation
