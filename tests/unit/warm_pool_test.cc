// WarmPool's sizing and bookkeeping with a fake maker: no sandboxes, no root.
#include "node/warm_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace warren::node {
namespace {

// Counts what the pool makes and gives back; every "sandbox" is just a name.
struct Fake {
  std::atomic<int> made{0}, discarded{0};
  std::atomic<bool> fail{false};
  WarmPool::Maker Maker() {
    return [this](const runtime::SandboxConfig& tmpl) -> Result<WarmSandbox> {
      EXPECT_TRUE(tmpl.id.empty());   // the pool names its own
      EXPECT_TRUE(tmpl.env.empty());  // each create sends its own environment
      if (fail) return Status(Code::kInternal, "make", "fake", "told to fail");
      WarmSandbox w;
      w.name = "warm-" + std::to_string(++made);
      return w;
    };
  }
  WarmPool::Discarder Discarder() {
    return [this](WarmSandbox&) { ++discarded; };
  }
};

runtime::SandboxConfig Tmpl() {
  runtime::SandboxConfig c;
  c.id = "sb-1";
  c.env = {{"A", "b"}};
  return c;
}

// Polls `cond` for up to 5 s (the filler runs on its own thread).
template <typename F>
bool Eventually(F cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// A pool of template "k" started by a first create (a miss: nothing was asked for before) and
// filled to `initial`.
std::unique_ptr<WarmPool> StartedPool(Fake& f, size_t initial, size_t max) {
  WarmPoolOptions o;
  o.initial = initial;
  o.max = max;
  auto pool = std::make_unique<WarmPool>(o, f.Maker(), f.Discarder());
  EXPECT_FALSE(pool->Take("k", Tmpl()));
  EXPECT_TRUE(Eventually([&] { return pool->Info()["ready"] == initial; }));
  return pool;
}

TEST(WarmPoolTest, FirstCreateStartsThePoolAndLaterOnesTakeFromIt) {
  Fake f;
  auto started = StartedPool(f, 2, 8);
  WarmPool& pool = *started;
  auto w = pool.Take("k", Tmpl());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->name.rfind("warm-", 0), 0u);
  EXPECT_EQ(pool.Info()["hits"], 1);
  ASSERT_TRUE(Eventually([&] { return pool.Info()["ready"] == 2; }));  // refilled
  EXPECT_FALSE(pool.Take("other", Tmpl()));                            // templates are separate
}

TEST(WarmPoolTest, ATakeGetsTheSandboxMadeLast) {
  Fake f;
  auto started = StartedPool(f, 3, 3);
  WarmPool& pool = *started;
  auto w = pool.Take("k", Tmpl());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->name, "warm-3");                                        // the warmest, not warm-1
  ASSERT_TRUE(Eventually([&] { return pool.Info()["ready"] == 3; }));  // refilled: warm-4
  w = pool.Take("k", Tmpl());
  ASSERT_TRUE(w);
  EXPECT_EQ(w->name, "warm-4");
}

TEST(WarmPoolTest, MissesGrowThePoolUpToItsCap) {
  Fake f;
  f.fail = true;  // nothing is ever ready, so every take misses
  WarmPoolOptions o;
  o.initial = 2;
  o.max = 8;
  o.rest = std::chrono::seconds(3600);
  WarmPool pool(o, f.Maker(), f.Discarder());
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(pool.Take("k", Tmpl()));
  auto info = pool.Info();
  EXPECT_EQ(info["target"], 8);  // 2, 4, 8, then capped
  EXPECT_EQ(info["misses"], 6);
  // Three failures in a row rest the template instead of retrying in a loop.
  ASSERT_TRUE(Eventually([&] { return pool.Info()["failed"] == 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(pool.Info()["failed"], 3);
}

TEST(WarmPoolTest, TotalCapBoundsEveryTemplate) {
  Fake f;
  f.fail = true;
  WarmPoolOptions o;
  o.initial = 2;
  o.max = 32;
  o.total_max = 5;
  o.rest = std::chrono::seconds(3600);
  WarmPool pool(o, f.Maker(), f.Discarder());
  for (int i = 0; i < 5; ++i) pool.Take("a", Tmpl());
  for (int i = 0; i < 5; ++i) pool.Take("b", Tmpl());
  EXPECT_LE(pool.Info()["target"], 5);
}

TEST(WarmPoolTest, UnusedTemplatesAndShutdownGiveEverythingBack) {
  Fake f;
  WarmPoolOptions o;
  o.initial = 3;
  o.unused_after = std::chrono::seconds(1);
  {
    WarmPool pool(o, f.Maker(), f.Discarder());
    pool.Take("k", Tmpl());
    ASSERT_TRUE(Eventually([&] { return pool.Info()["ready"] == 3; }));
    // Nobody asks again: after a second the template and its sandboxes go.
    ASSERT_TRUE(Eventually([&] { return pool.Info()["templates"] == 0; }));
    EXPECT_EQ(f.discarded, 3);
    pool.Take("k", Tmpl());
    ASSERT_TRUE(Eventually([&] { return pool.Info()["ready"] == 3; }));
  }
  // The destructor discards what was still waiting: every sandbox made was given back.
  EXPECT_EQ(f.discarded.load(), f.made.load());
}

TEST(WarmPoolTest, SizeZeroMakesNothing) {
  Fake f;
  WarmPoolOptions o;
  o.initial = 0;
  WarmPool pool(o, f.Maker(), f.Discarder());
  EXPECT_FALSE(pool.Take("k", Tmpl()));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(f.made, 0);
}

}  // namespace
}  // namespace warren::node
