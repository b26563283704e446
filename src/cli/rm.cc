// warren rm ID...
#include "cli/common.h"

namespace warren::cli {

void AddRm(CLI::App& app) {
  auto* cmd = app.add_subcommand("rm", "delete sandboxes");
  auto ids = std::make_shared<std::vector<std::string>>();
  cmd->add_option("ids", *ids, "sandbox ids")->required();
  cmd->callback([ids] {
    for (const auto& id : *ids) {
      auto r = Client().Request("DELETE", "/v1/sandboxes/" + client::UrlEncode(id));
      Status st = r.ok() ? client::ToStatus(*r, "delete sandbox " + id) : r.status();
      if (!st.ok()) ExitCode() = Fail(st);
    }
  });
}

}  // namespace warren::cli
