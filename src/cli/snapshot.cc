// warren snapshot ID --tag NAME:TAG [--max-mb N] [--json]: a sandbox's files as a workspace
// layer (its workspace layer and its changes, deletions included).
// warren fork ID [-n N] [--tag NAME:TAG] [--json]: N new sandboxes from its files now, all or
// none; their ids, one a line. A fork of more than one shows its progress on a terminal.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/common.h"

namespace warren::cli {
namespace {

std::string SandboxPath(const std::string& id) { return "/v1/sandboxes/" + client::UrlEncode(id); }

// How many children of `parent` run now, on stderr, until `done`: the fork's one request
// answers only at the end.
class ForkProgress {
 public:
  ForkProgress(std::string parent, int64_t n) : parent_(std::move(parent)), n_(n) {
    thread_ = std::thread([this] { Run(); });
  }
  ~ForkProgress() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
    fprintf(stderr, "\r\033[K");
  }

 private:
  void Run() {
    client::HttpClient c(ServerUrl(), Token());  // its own connection: the fork holds one
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return done_; })) {
      lock.unlock();
      auto r =
          c.Request("GET", "/v1/sandboxes?parent=" + client::UrlEncode(parent_) + "&state=running");
      if (r.ok() && r->status == 200) {
        auto j = nlohmann::json::parse(r->body, nullptr, false);
        if (j.is_object() && j.contains("sandboxes") && j["sandboxes"].is_array())
          fprintf(stderr, "\rforking %s: %zu of %lld ready", parent_.c_str(), j["sandboxes"].size(),
                  static_cast<long long>(n_));
      }
      lock.lock();
    }
  }

  const std::string parent_;
  const int64_t n_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

void AddSnapshot(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "snapshot", "save a sandbox's files as a workspace layer NAME:TAG (it keeps running)");
  auto id = std::make_shared<std::string>();
  auto tag = std::make_shared<std::string>();
  auto max_mb = std::make_shared<uint64_t>(0);
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("id", *id, "sandbox id")->required();
  cmd->add_option("--tag", *tag, "the layer's NAME:TAG")->required();
  cmd->add_option("--max-mb", *max_mb, "refuse a snapshot holding more file data than this");
  cmd->add_flag("--json", *as_json, "the API's JSON");
  cmd->callback([id, tag, max_mb, as_json] {
    nlohmann::json body = {{"tag", *tag}};
    if (*max_mb) body["max_mb"] = *max_mb;
    auto r = Client().Request("POST", SandboxPath(*id) + "/snapshot", body.dump());
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "snapshot " + *id);
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    if (*as_json) return void(printf("%s\n", j->dump(2).c_str()));
    const nlohmann::json s = j->value("snapshot", nlohmann::json::object());
    printf("%s:%s %s\n", j->value("name", "").c_str(), j->value("tag", "").c_str(),
           j->value("digest", "").c_str());
    fprintf(stderr, "%llu entries, %llu bytes of files, %.2f s\n",
            static_cast<unsigned long long>(s.value("entries", 0ull)),
            static_cast<unsigned long long>(s.value("file_bytes", 0ull)), s.value("seconds", 0.0));
  });
}

void AddFork(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "fork",
      "make N sandboxes from a sandbox now (all or none; a microVM's memory and processes "
      "too); prints their ids");
  auto id = std::make_shared<std::string>();
  auto n = std::make_shared<int64_t>(1);
  auto tag = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("id", *id, "sandbox id")->required();
  cmd->add_option("-n,--count", *n, "how many (default 1)");
  cmd->add_option("--tag", *tag, "also name the snapshot NAME:TAG");
  cmd->add_flag("--json", *as_json, "the API's JSON");
  cmd->callback([id, n, tag, as_json] {
    nlohmann::json body = {{"count", *n}};
    if (!tag->empty()) body["tag"] = *tag;
    auto r = [&] {
      std::optional<ForkProgress> progress;
      if (*n > 1 && isatty(STDERR_FILENO)) progress.emplace(*id, *n);
      return Client().Request("POST", SandboxPath(*id) + "/fork", body.dump());
    }();
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "fork " + *id);
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    if (*as_json) return void(printf("%s\n", j->dump(2).c_str()));
    for (const auto& c : j->value("sandboxes", nlohmann::json::array()))
      printf("%s\n", c.value("id", "").c_str());
    const size_t made = j->value("sandboxes", nlohmann::json::array()).size();
    const nlohmann::json memory = j->value("memory", nlohmann::json());
    if (memory.is_object())
      fprintf(stderr, "%zu forked from %s with its memory in %.2f s (it stood still %.2f s)\n",
              made, id->c_str(), j->value("seconds", 0.0), memory.value("paused_seconds", 0.0));
    else
      fprintf(stderr, "%zu forked from %s in %.2f s (snapshot %.2f s)\n", made, id->c_str(),
              j->value("seconds", 0.0),
              j->value("snapshot", nlohmann::json::object()).value("seconds", 0.0));
  });
}

}  // namespace warren::cli
