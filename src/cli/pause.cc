// warren pause ID... | warren resume ID...: freeze or thaw every process of a sandbox.
#include "cli/common.h"

namespace warren::cli {
namespace {

void AddOne(CLI::App& app, const char* name, const char* help) {
  auto* cmd = app.add_subcommand(name, help);
  auto ids = std::make_shared<std::vector<std::string>>();
  cmd->add_option("ids", *ids, "sandbox ids")->required();
  const std::string verb = name;
  cmd->callback([ids, verb] {
    for (const auto& id : *ids) {
      auto r = Client().Request("POST", "/v1/sandboxes/" + client::UrlEncode(id) + "/" + verb);
      Status st = r.ok() ? client::ToStatus(*r, verb + " sandbox " + id) : r.status();
      if (!st.ok()) ExitCode() = Fail(st);
    }
  });
}

}  // namespace

void AddPause(CLI::App& app) {
  AddOne(app, "pause", "freeze sandboxes (cgroup freezer): their processes stop, memory stays");
  AddOne(app, "resume", "thaw paused sandboxes");
}

}  // namespace warren::cli
