// warren net ID (--none | --allow RULE...): change a sandbox's network policy.
#include "cli/common.h"

namespace warren::cli {

void AddNet(CLI::App& app) {
  auto* cmd = app.add_subcommand("net", "change a sandbox's network policy");
  auto id = std::make_shared<std::string>();
  auto none = std::make_shared<bool>(false);
  auto allow = std::make_shared<std::vector<std::string>>();
  cmd->add_option("id", *id, "sandbox id")->required();
  auto* none_opt = cmd->add_flag("--none", *none, "no network (loopback only)");
  // `--allow R1 R2` and `--allow R1 --allow R2` alike (no `--` follows here to swallow).
  auto* allow_opt =
      cmd->add_option("--allow", *allow, "egress rules: domain, *.domain or CIDR[:port[/proto]]")
          ->expected(1, -1)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  none_opt->excludes(allow_opt);
  cmd->callback([id, none, allow] {
    if (!*none && allow->empty())
      return void(ExitCode() = Fail("net " + *id, "give --none or --allow RULE"));
    nlohmann::json policy = {{"mode", *none ? "none" : "egress"}, {"allow", *allow}};
    auto r = Client().Request("PUT", "/v1/sandboxes/" + client::UrlEncode(*id) + "/network",
                              policy.dump());
    Status st = r.ok() ? client::ToStatus(*r, "set network of " + *id) : r.status();
    if (!st.ok()) ExitCode() = Fail(st);
  });
}

}  // namespace warren::cli
