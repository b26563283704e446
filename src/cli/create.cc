// warren create [SPEC FLAGS]: prints the new sandbox's id.
#include "cli/common.h"

namespace warren::cli {

void AddCreate(CLI::App& app) {
  auto* cmd = app.add_subcommand("create", "create a sandbox and print its id");
  auto flags = std::make_shared<SpecFlags>();
  AddSpecFlags(cmd, flags.get());
  cmd->callback([flags] {
    auto spec = SpecJson(*flags);
    if (!spec.ok()) return void(ExitCode() = Fail(spec.status()));
    auto r = Client().Request("POST", "/v1/sandboxes", spec->dump());
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto sb = client::JsonOf(*r, "create sandbox");
    if (!sb.ok()) return void(ExitCode() = Fail(sb.status()));
    printf("%s\n", (*sb)["id"].get<std::string>().c_str());
  });
}

}  // namespace warren::cli
