// warren token create NAME [--scopes S1,S2] [--max-sandboxes N] [--max-cpu N] [--max-memory SIZE]
//                          [--create-rate N] [--max-calls N] [--call-rate N]
// warren token ls | warren token rm NAME
#include "cli/common.h"

namespace warren::cli {
namespace {

std::string Limit(const nlohmann::json& v) {
  if (!v.is_number() || v.get<double>() == 0) return "-";
  char b[32];
  snprintf(b, sizeof b, "%g", v.get<double>());
  return b;
}

}  // namespace

void AddToken(CLI::App& app) {
  auto* token = app.add_subcommand("token", "create, list and revoke API tokens (admin)");
  token->require_subcommand(1);

  struct CreateFlags {
    std::string name, scopes, max_memory;
    double max_cpu = 0, create_rate = 0, call_rate = 0;
    int64_t max_sandboxes = 0, max_calls = 0;
  };
  auto f = std::make_shared<CreateFlags>();
  auto* create = token->add_subcommand("create", "create a token; prints it once");
  create->add_option("name", f->name, "the principal's name")->required();
  create->add_option(
      "--scopes", f->scopes,
      "comma-separated: admin, sandbox:*, sandbox:read, sandbox:write, exec, call, image:*, "
      "image:read, image:write (default sandbox:*,exec,call,image:read)");
  create->add_option("--max-sandboxes", f->max_sandboxes, "live sandboxes at once (0: unlimited)");
  create->add_option("--max-cpu", f->max_cpu, "sum of the sandboxes' cpu (0: unlimited)");
  create->add_option("--max-memory", f->max_memory, "sum of the sandboxes' memory, e.g. 64G");
  create->add_option("--create-rate", f->create_rate, "sandbox creates per second (0: unlimited)");
  create->add_option("--max-calls", f->max_calls,
                     "fncall calls running at once, a batch counting each (0: unlimited)");
  create->add_option("--call-rate", f->call_rate, "fncall calls started per second (0: unlimited)");
  create->callback([f] {
    nlohmann::json j = {{"name", f->name},           {"max_sandboxes", f->max_sandboxes},
                        {"max_cpu", f->max_cpu},     {"create_rate", f->create_rate},
                        {"max_calls", f->max_calls}, {"call_rate", f->call_rate}};
    if (!f->scopes.empty()) j["scopes"] = SplitList(f->scopes);
    if (!f->max_memory.empty()) {
      auto mb = SizeMb(f->max_memory, "--max-memory");
      if (!mb.ok()) return void(ExitCode() = Fail(mb.status()));
      j["max_memory_mb"] = *mb;
    }
    auto r = Client().Request("POST", "/v1/tokens", j.dump());
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto out = client::JsonOf(*r, "create token " + f->name);
    if (!out.ok()) return void(ExitCode() = Fail(out.status()));
    printf("%s\n", (*out)["token"].get<std::string>().c_str());
    fprintf(stderr, "token `%s` created; it is shown only this once\n", f->name.c_str());
  });

  auto* ls = token->add_subcommand("ls", "list tokens (never their secrets)");
  auto ls_json = std::make_shared<bool>(false);
  ls->add_flag("--json", *ls_json, "print the API's JSON");
  ls->callback([ls_json] {
    auto r = Client().Request("GET", "/v1/tokens");
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "list tokens");
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    if (*ls_json) return void(printf("%s\n", j->dump(2).c_str()));
    printf("%-20s %-36s %9s %7s %10s %6s  %s\n", "NAME", "SCOPES", "SANDBOXES", "CPU", "MEMORY_MB",
           "RATE/S", "CREATED");
    for (const auto& t : (*j)["tokens"]) {
      std::string scopes;
      for (const auto& s : t["scopes"])
        scopes += (scopes.empty() ? "" : ",") + s.get<std::string>();
      const auto& q = t["quotas"];
      const auto& u = t.value("usage", nlohmann::json::object());
      auto used = [&](const char* k, const char* qk) {
        return std::to_string(u.value(k, 0ll)) + "/" + Limit(q.value(qk, nlohmann::json(0)));
      };
      printf("%-20s %-36s %9s %7s %10s %6s  %s\n", t.value("name", "").c_str(), scopes.c_str(),
             used("sandboxes", "max_sandboxes").c_str(), Limit(q["max_cpu"]).c_str(),
             Limit(q["max_memory_mb"]).c_str(), Limit(q["create_rate"]).c_str(),
             t.value("created_at", "").c_str());
    }
  });

  auto* rm =
      token->add_subcommand("rm", "revoke a token (its sandboxes stay; the admin sees them)");
  auto name = std::make_shared<std::string>();
  rm->add_option("name", *name, "the token's name")->required();
  rm->callback([name] {
    auto r = Client().Request("DELETE", "/v1/tokens/" + client::UrlEncode(*name));
    Status st = r.ok() ? client::ToStatus(*r, "revoke token " + *name) : r.status();
    if (!st.ok()) ExitCode() = Fail(st);
  });
}

}  // namespace warren::cli
