// `warren node cordon|uncordon|drain NAME`: a cluster node taken out of placement (and, for
// drain, emptied of its sandboxes) or put back, through any API server with an admin token.
#include <cstdio>

#include "cli/common.h"

namespace warren::cli {

void AddNodeAdmin(CLI::App* node) {
  struct Action {
    const char* name;
    const char* help;
  };
  static const Action kActions[] = {
      {"cordon", "stop placing new sandboxes on a node (its sandboxes keep running)"},
      {"uncordon", "put a cordoned or drained node back into placement"},
      {"drain", "cordon a node and delete every sandbox on it"},
  };
  for (const Action& a : kActions) {
    auto* cmd = node->add_subcommand(a.name, a.help);
    auto name = std::make_shared<std::string>();
    cmd->add_option("name", *name, "the node's name")->required();
    const std::string action = a.name;
    cmd->callback([name, action] {
      auto r = Client().Request("POST", "/v1/nodes/" + client::UrlEncode(*name) + "/" + action);
      if (!r.ok()) return void(ExitCode() = Fail(r.status()));
      auto out = client::JsonOf(*r, action + " node " + *name);
      if (!out.ok()) return void(ExitCode() = Fail(out.status()));
      const nlohmann::json& j = *out;
      printf("%s %s", j.value("node", "").c_str(), j.value("state", "").c_str());
      if (action == "drain") printf(": %d sandbox(es) deleted", j.value("deleted", 0));
      printf("\n");
      for (const auto& e : j.value("errors", nlohmann::json::array()))
        fprintf(stderr, "%s: %s\n", e.value("id", "").c_str(), e.value("error", "").c_str());
      if (!j.value("errors", nlohmann::json::array()).empty()) ExitCode() = 1;
    });
  }
}

}  // namespace warren::cli
