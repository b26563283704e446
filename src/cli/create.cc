// warren create [SPEC FLAGS]: prints the new sandbox's id.
#include "cli/common.h"

namespace warren::cli {

void AddCreate(CLI::App& app) {
  auto* cmd = app.add_subcommand("create", "create a sandbox and print its id");
  auto flags = std::make_shared<SpecFlags>();
  AddSpecFlags(cmd, flags.get());
  cmd->callback([flags] {
    auto id = CreateFromFlags(*flags);
    if (!id.ok()) return void(ExitCode() = Fail(id.status()));
    printf("%s\n", id->c_str());
  });
}

}  // namespace warren::cli
