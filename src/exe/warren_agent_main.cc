// warren-agent: see src/agent/agent.h.
#include "agent/agent.h"

int main() { return warren::agent::Run(); }
