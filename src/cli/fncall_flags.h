// The fncall flags of a machine that runs calls (`warren serve`, `warren node`) and what the
// node's call service is made of: pool sizes, the calls' seccomp filter, the zygote library,
// and how a runner image's name is found.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "node/fncall/call_pool.h"
#include "server/state_store.h"

namespace warren::cli {

struct FncallFlags {
  std::string image;
  int runners = 0;  // 0: one per CPU
  int workers = 4;
};

void AddFncallFlags(CLI::App* cmd, FncallFlags* f);

// `hardened` false: calls run without their seccomp filter (benchmark mode).
Result<fncall::PoolOptions> FncallPoolOptionsOf(const FncallFlags& f, bool hardened);

// NAME:TAG -> its layer digests, from the image records of `state` (SQLite in serve, etcd on
// a cluster node). Answers are kept for `cache_s` seconds (0: asked every time).
fncall::ImageResolver RunnerImageResolver(server::StateStore* state, int cache_s = 0);

}  // namespace warren::cli
