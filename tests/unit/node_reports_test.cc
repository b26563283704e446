// NodeReports (cluster/node_reports.h): nodes asked at once, a silent node delays a reader by
// at most `wait` and is left out, a storm of readers costs one round at a time, each reader
// sees a round begun after it asked, and nodes that leave leave the reports.
#include "cluster/node_reports.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <set>

namespace warren::cluster {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct FakeNodes {
  std::mutex mu;
  std::vector<std::string> names{"a", "b", "c"};
  std::set<std::string> silent;  // these hang until released
  std::atomic<int> asks{0};
  std::promise<void> release;
  std::shared_future<void> released{release.get_future().share()};

  std::vector<std::string> Names() {
    std::lock_guard<std::mutex> lock(mu);
    return names;
  }
  json Ask(const std::string& name) {
    ++asks;
    bool hang;
    {
      std::lock_guard<std::mutex> lock(mu);
      hang = silent.count(name) > 0;
    }
    if (hang) released.wait();
    if (name == "c") return json();  // answered nothing usable
    return {{"name", name}, {"asks", asks.load()}};
  }
};

NodeReports Make(FakeNodes* f, NodeReportsOptions o) {
  return NodeReports([f] { return f->Names(); }, [f](const std::string& n) { return f->Ask(n); },
                     o);
}

TEST(NodeReports, EveryNodeThatAnswersIsReported) {
  FakeNodes f;
  NodeReports r = Make(&f, {.wait = 5000ms});
  auto got = r.Get();
  EXPECT_EQ(got.size(), 2u);  // c gave nothing
  EXPECT_EQ(got.at("a")["name"], "a");
  EXPECT_EQ(f.asks.load(), 3);
}

TEST(NodeReports, ASilentNodeDelaysAReaderOnlyUpToWait) {
  FakeNodes f;
  f.silent = {"b"};
  NodeReports r = Make(&f, {.wait = 200ms, .parallel = 3});
  auto got = r.Get();  // returns while b still hangs: a reader waits `wait`, not for b
  EXPECT_TRUE(got.count("a"));
  EXPECT_FALSE(got.count("b"));
  // While that round hangs, readers share the one round after it: none begins meanwhile.
  const int before = f.asks.load();
  for (int i = 0; i < 5; ++i) r.Get();
  EXPECT_EQ(f.asks.load(), before);
  f.release.set_value();
  // The next round has b too.
  std::map<std::string, json> later;
  for (int i = 0; i < 100 && !later.count("b"); ++i) later = r.Get();
  EXPECT_TRUE(later.count("b"));
}

TEST(NodeReports, EachReaderSeesARoundBegunAfterItAskedAndGoneNodesLeave) {
  FakeNodes f;
  NodeReports r = Make(&f, {.wait = 5000ms});
  const int first = r.Get().at("a")["asks"];
  const int second = r.Get().at("a")["asks"];
  EXPECT_GT(second, first);  // asked again: what happened between the calls shows

  FakeNodes g;
  NodeReports q = Make(&g, {.wait = 5000ms});
  EXPECT_TRUE(q.Get().count("a"));
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.names = {"b"};
  }
  auto got = q.Get();
  EXPECT_FALSE(got.count("a"));
  EXPECT_TRUE(got.count("b"));
}

}  // namespace
}  // namespace warren::cluster
