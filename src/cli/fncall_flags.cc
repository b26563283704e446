#include "cli/fncall_flags.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "isolation/seccomp_policy.h"
#include "runtime/container/agent_binary.h"
#include "server/api_types.h"

namespace warren::cli {

void AddFncallFlags(CLI::App* cmd, FncallFlags* f) {
  cmd->add_option(
      "--fncall-image", f->image,
      "runner image (NAME:TAG) of calls that name none; it needs python3 and the toolchains");
  cmd->add_option("--fncall-runners", f->runners,
                  "runner sandboxes per runner image at most (default: one per CPU)");
  cmd->add_option("--fncall-workers", f->workers, "calls running at once in one runner");
}

Result<fncall::PoolOptions> FncallPoolOptionsOf(const FncallFlags& f, bool hardened) {
  fncall::PoolOptions o;
  o.default_image = f.image;
  o.max_runners = f.runners > 0
                      ? f.runners
                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  o.workers_per_runner = f.workers;
  if (hardened) {
    auto bpf = isolation::CompileSeccompPolicy(isolation::CallSeccompPolicy());
    if (!bpf.ok()) return bpf.status().Context("call seccomp policy");
    o.call_seccomp_bpf = *bpf;
  }
  const std::string lib_path = runtime::DefaultZygoteLibPath();
  std::ifstream lib_file(lib_path, std::ios::binary);
  std::ostringstream lib;
  lib << lib_file.rdbuf();
  if (lib_file && !lib.str().empty())
    o.zygote_lib = std::make_shared<const std::string>(lib.str());
  else
    spdlog::warn("fncall: cannot read {}: the zygote runs in Python", lib_path);
  return o;
}

fncall::ImageResolver RunnerImageResolver(server::StateStore* state, int cache_s) {
  struct Cache {
    std::mutex mu;
    std::map<std::string,
             std::pair<std::vector<std::string>, std::chrono::steady_clock::time_point>>
        found;
  };
  auto cache = std::make_shared<Cache>();
  return [state, cache_s, cache](const std::string& ref) -> Result<std::vector<std::string>> {
    const auto now = std::chrono::steady_clock::now();
    if (cache_s > 0) {
      std::lock_guard lock(cache->mu);
      auto it = cache->found.find(ref);
      if (it != cache->found.end() && now - it->second.second < std::chrono::seconds(cache_s))
        return it->second.first;
    }
    std::string name, tag;
    WARREN_RETURN_IF_ERROR(server::ParseImageRef(ref, &name, &tag));
    auto rec = state->GetLayer(name, tag);
    if (!rec.ok()) {
      if (rec.status().code() != Code::kNotFound) return rec.status().Context("find runner image");
      return Invalid("unknown runner image `" + ref + "` (build one with warren image build)");
    }
    std::vector<std::string> layers{rec->digest};
    if (cache_s > 0) {
      std::lock_guard lock(cache->mu);
      if (cache->found.size() > 1024) cache->found.clear();  // names are few; bound it anyway
      cache->found[ref] = {layers, now};
    }
    return layers;
  };
}

}  // namespace warren::cli
