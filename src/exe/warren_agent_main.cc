// warren-agent: see src/agent/agent.h. `warren-agent --call-worker ...` is one fncall call's
// worker instead (see src/agent/call_worker.h).
#include <cstring>

#include "agent/agent.h"
#include "agent/call_worker.h"

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--call-worker") == 0) return warren::agent::CallWorkerMain(argc, argv);
  return warren::agent::Run();
}
