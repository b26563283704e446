// warren fs ID [--read-only PATH]... [--writable PATH]... | --all-writable: change a sandbox's
// filesystem policy (which trees are read-only for its occupant, root included).
// warren diff ID [--path P] [--limit N] [--json]: what the occupant changed relative to its layers.
#include "cli/common.h"

namespace warren::cli {

void AddFs(CLI::App& app) {
  auto* cmd = app.add_subcommand("fs", "change a sandbox's filesystem policy (read-only trees)");
  auto id = std::make_shared<std::string>();
  auto ro = std::make_shared<std::vector<std::string>>();
  auto rw = std::make_shared<std::vector<std::string>>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("id", *id, "sandbox id")->required();
  auto* ro_opt = Repeatable(
      cmd->add_option("--read-only", *ro, "a tree the occupant cannot change (repeatable)"));
  auto* rw_opt = Repeatable(cmd->add_option(
      "--writable", *rw, "a tree inside a read-only one that stays writable (repeatable)"));
  auto* all_opt = cmd->add_flag("--all-writable", *all, "no read-only tree (the default policy)");
  all_opt->excludes(ro_opt)->excludes(rw_opt);
  cmd->callback([id, ro, rw, all] {
    if (!*all && ro->empty() && rw->empty())
      return void(ExitCode() = Fail("fs " + *id,
                                    "give --read-only PATH, --writable PATH or --all-writable"));
    nlohmann::json policy = {{"read_only", *ro}, {"writable", *rw}};
    auto r = Client().Request("PUT", "/v1/sandboxes/" + client::UrlEncode(*id) + "/filesystem",
                              policy.dump());
    Status st = r.ok() ? client::ToStatus(*r, "set filesystem policy of " + *id) : r.status();
    if (!st.ok()) ExitCode() = Fail(st);
  });
}

void AddDiff(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("diff", "list what a sandbox's occupant changed relative to its layers");
  auto id = std::make_shared<std::string>();
  auto path = std::make_shared<std::string>();
  auto limit = std::make_shared<uint64_t>(0);
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("id", *id, "sandbox id")->required();
  cmd->add_option("--path", *path, "only changes at or below this path");
  cmd->add_option("--limit", *limit, "at most this many changes (default 10000)");
  cmd->add_flag("--json", *as_json, "the API's JSON");
  cmd->callback([id, path, limit, as_json] {
    std::string q;
    if (!path->empty()) q += "path=" + client::UrlEncode(*path);
    if (*limit) q += std::string(q.empty() ? "" : "&") + "limit=" + std::to_string(*limit);
    auto r = Client().Request(
        "GET", "/v1/sandboxes/" + client::UrlEncode(*id) + "/changes" + (q.empty() ? "" : "?" + q));
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "diff " + *id);
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    if (*as_json) return void(printf("%s\n", j->dump(2).c_str()));
    // One line each, as `git status --short` does: A added, M modified, D deleted; the layer a
    // change shadows follows.
    for (const auto& c : j->value("changes", nlohmann::json::array())) {
      const std::string change = c.value("change", "");
      const char mark = change == "added"      ? 'A'
                        : change == "modified" ? 'M'
                        : change == "deleted"  ? 'D'
                                               : '?';
      std::string line = std::string(1, mark) + " " + c.value("path", "");
      if (c.value("type", "") == "dir") line += "/";
      if (c.contains("layer") && c["layer"].is_object())
        line += "  (" + c["layer"].value("role", "") + " " + c["layer"].value("ref", "") + ")";
      printf("%s\n", line.c_str());
    }
    if (j->value("truncated", false))
      fprintf(stderr, "warren: diff %s: more changes than listed (raise --limit)\n", id->c_str());
  });
}

}  // namespace warren::cli
