// warren inspect ID: the sandbox as JSON.
#include "cli/common.h"

namespace warren::cli {

void AddInspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "show a sandbox as JSON");
  auto id = std::make_shared<std::string>();
  cmd->add_option("id", *id, "sandbox id")->required();
  cmd->callback([id] {
    auto r = Client().Request("GET", "/v1/sandboxes/" + client::UrlEncode(*id));
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "inspect " + *id);
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    printf("%s\n", j->dump(2).c_str());
  });
}

}  // namespace warren::cli
