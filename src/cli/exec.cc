// warren exec ID [--timeout S] [--cwd D] [--env K=V]... -- CMD [ARGS...]
#include "cli/common.h"

namespace warren::cli {

void AddExec(CLI::App& app) {
  auto* cmd = app.add_subcommand("exec", "run a command in a sandbox, streaming its output");
  auto id = std::make_shared<std::string>();
  auto flags = std::make_shared<ExecFlags>();
  cmd->add_option("id", *id, "sandbox id")->required();
  AddExecFlags(cmd, flags.get());
  cmd->callback([id, flags] { ExitCode() = ExecAndStream(*id, *flags); });
}

}  // namespace warren::cli
