// warren-agent: see src/agent/agent.h. `warren-agent --call-dispatcher` is an fncall runner's
// dispatcher instead (src/agent/call_dispatcher.h), `--fs-helper PID` the node's hands inside a
// container sandbox while it applies a filesystem policy (src/agent/fs_helper.h).
#include <unistd.h>

#include <cstring>

#include "agent/agent.h"
#include "agent/call_dispatcher.h"
#include "agent/fs_helper.h"
#include "agent/vm_init.h"

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], warren::agent::kWarmExecFlag) == 0) return 0;
  if (argc > 1 && strcmp(argv[1], "--call-dispatcher") == 0)
    return warren::agent::CallDispatcherMain(argc, argv);
  if (argc > 2 && strcmp(argv[1], warren::agent::kFsHelperFlag) == 0)
    return warren::agent::FsHelperMain(argc, argv);
  // In a full-OS VM, systemd starts us as a service (the unit our PID 1 left behind).
  if (argc > 2 && strcmp(argv[1], "--vm-service") == 0) return warren::agent::RunVmService(argv[2]);
  // In a microVM the kernel starts us as /init; in a container the node runs us from its copy of us
  // (runtime/container/agent_binary.h).
  if (getpid() == 1 && argc > 0 && strcmp(argv[0], "/init") == 0) return warren::agent::RunVm();
  return warren::agent::Run();
}
