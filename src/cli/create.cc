// warren create [SPEC FLAGS] [--count N] [--json]: prints the new sandbox's id (one per line
// with --count; the API's JSON with --json).
#include <unistd.h>

#include <algorithm>

#include "cli/common.h"

namespace warren::cli {
namespace {

// A one-line progress bar on stderr, redrawn in place (only on a terminal).
void Progress(int64_t done, int64_t total, int64_t failed) {
  if (!isatty(STDERR_FILENO)) return;
  constexpr int kWidth = 40;
  int fill = total ? static_cast<int>(done * kWidth / total) : kWidth;
  fprintf(stderr, "\r[%.*s%*s] %lld/%lld created%s", fill,
          "########################################", kWidth - fill, "",
          static_cast<long long>(done - failed), static_cast<long long>(total),
          failed ? (", " + std::to_string(failed) + " failed").c_str() : "");
  if (done == total) fprintf(stderr, "\n");
  fflush(stderr);
}

// Many sandboxes: batches of up to 100 (one POST /v1/sandboxes:batch each), with progress.
int CreateMany(const SpecFlags& f, int64_t count, bool as_json) {
  auto spec = SpecJson(f);
  if (!spec.ok()) return Fail(spec.status());
  const int64_t chunk = std::clamp<int64_t>(count / 20, 1, 100);
  nlohmann::json all = nlohmann::json::array(), errors = nlohmann::json::array();
  int64_t done = 0;
  Progress(0, count, 0);
  while (done < count) {
    int64_t n = std::min(chunk, count - done);
    auto r = Client().Request("POST", "/v1/sandboxes:batch",
                              nlohmann::json{{"count", n}, {"spec", *spec}}.dump());
    auto j = r.ok() ? client::JsonOf(*r, "create sandboxes") : Result<nlohmann::json>(r.status());
    if (!j.ok()) {
      // A chunk failed whole (the server went away, a quota): what was made before it is
      // still the caller's to use or delete, so it is printed before the error.
      if (as_json)
        printf("%s\n", nlohmann::json{{"sandboxes", all}, {"errors", errors}}.dump(2).c_str());
      fflush(stdout);
      if (done)
        fprintf(stderr, "\nwarren: create: %lld of %lld sandboxes were made before this failure\n",
                static_cast<long long>(all.size()), static_cast<long long>(count));
      return Fail(j.status());
    }
    for (auto& sb : (*j)["sandboxes"]) {
      if (!as_json) printf("%s\n", sb.value("id", "").c_str());
      all.push_back(sb);
    }
    fflush(stdout);
    for (auto e : (*j)["errors"]) {
      e["index"] = e.value("index", int64_t{0}) + done;
      errors.push_back(e);
    }
    done += n;
    Progress(done, count, static_cast<int64_t>(errors.size()));
  }
  if (as_json)
    printf("%s\n", nlohmann::json{{"sandboxes", all}, {"errors", errors}}.dump(2).c_str());
  for (const auto& e : errors)
    fprintf(stderr, "warren: create sandbox #%lld: %s\n",
            static_cast<long long>(e.value("index", int64_t{0})),
            e["error"].value("message", "").c_str());
  return errors.empty() ? 0 : 1;
}

}  // namespace

void AddCreate(CLI::App& app) {
  auto* cmd = app.add_subcommand("create", "create sandboxes and print their ids");
  auto flags = std::make_shared<SpecFlags>();
  auto count = std::make_shared<int64_t>(1);
  auto as_json = std::make_shared<bool>(false);
  AddSpecFlags(cmd, flags.get());
  cmd->add_option("--count", *count, "how many (batches with a progress bar)")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--json", *as_json, "print the API's JSON instead of ids");
  cmd->callback([flags, count, as_json] {
    if (*count > 1) return void(ExitCode() = CreateMany(*flags, *count, *as_json));
    auto spec = SpecJson(*flags);
    if (!spec.ok()) return void(ExitCode() = Fail(spec.status()));
    auto r = Client().Request("POST", "/v1/sandboxes", spec->dump());
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto sb = client::JsonOf(*r, "create sandbox");
    if (!sb.ok()) return void(ExitCode() = Fail(sb.status()));
    if (*as_json)
      printf("%s\n", sb->dump(2).c_str());
    else
      printf("%s\n", (*sb)["id"].get<std::string>().c_str());
  });
}

}  // namespace warren::cli
