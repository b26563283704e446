// warren run [SPEC FLAGS] -- CMD [ARGS...]: create, exec, delete.
#include "cli/common.h"

namespace warren::cli {

void AddRun(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "create a sandbox, run one command in it, delete it");
  auto spec = std::make_shared<SpecFlags>();
  auto flags = std::make_shared<ExecFlags>();
  AddSpecFlags(cmd, spec.get());
  // --env belongs to the sandbox spec here; exec flags keep --timeout, --cwd, -i and CMD.
  cmd->add_option("--timeout", flags->timeout, "seconds before the command is killed (exit 124)");
  cmd->add_option("--cwd", flags->cwd, "working directory inside the sandbox");
  cmd->add_flag("-i,--stdin", flags->stdin_from_terminal, "send our standard input to the command");
  cmd->add_option("cmd", flags->argv, "command and arguments (after --)");
  cmd->callback([spec, flags] {
    auto created = CreateFromFlags(*spec);
    if (!created.ok()) return void(ExitCode() = Fail(created.status()));
    const std::string id = *created;
    ExitCode() = ExecAndStream(id, *flags);
    auto d = Client().Request("DELETE", "/v1/sandboxes/" + id);
    Status st = d.ok() ? client::ToStatus(*d, "delete sandbox " + id) : d.status();
    if (!st.ok()) Fail(st);
  });
}

}  // namespace warren::cli
