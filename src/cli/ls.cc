// warren ls [--label K=V]...
#include "cli/common.h"

namespace warren::cli {

void AddLs(CLI::App& app) {
  auto* cmd = app.add_subcommand("ls", "list sandboxes");
  auto labels = std::make_shared<std::vector<std::string>>();
  auto as_json = std::make_shared<bool>(false);
  Repeatable(cmd->add_option("--label", *labels, "only sandboxes with label K=V (repeatable)"));
  cmd->add_flag("--json", *as_json, "print the API's JSON");
  cmd->callback([labels, as_json] {
    std::string target = "/v1/sandboxes";
    for (size_t i = 0; i < labels->size(); ++i)
      target += (i ? "&" : "?") + std::string("label=") + client::UrlEncode((*labels)[i]);
    auto r = Client().Request("GET", target);
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "list sandboxes");
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    if (*as_json) return void(printf("%s\n", j->dump(2).c_str()));
    printf("%-20s %-9s %-10s %-24s %s\n", "ID", "BACKEND", "STATE", "IMAGE", "CREATED");
    for (const auto& sb : (*j)["sandboxes"])
      printf("%-20s %-9s %-10s %-24s %s\n", sb.value("id", "").c_str(),
             sb.value("backend", "").c_str(), sb.value("state", "").c_str(),
             sb.value("image", "").c_str(), sb.value("created_at", "").c_str());
  });
}

}  // namespace warren::cli
