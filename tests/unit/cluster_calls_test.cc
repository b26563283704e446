#include "cluster/cluster_calls.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "fake_node.h"

namespace warren::cluster {
namespace {

using nlohmann::json;

// A node whose fncall service answers each call with its own name and the call's `n`, or
// fails as told.
class CallNode : public testing::FakeNode {
 public:
  explicit CallNode(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Result<json> RunCall(const json& request, bool batch) override {
    ++requests;
    if (unreachable)
      return Status(Code::kUnavailable, "call", name_, "node unreachable").WithRetryAfter(1);
    if (!batch) return Answer(request);
    json results = json::array();
    for (const auto& c : request["calls"]) {
      auto one = Answer(c);
      results.push_back(one.ok() ? *one : json{{"error", {{"code", "invalid"}}}});
    }
    calls_in_batches += static_cast<int>(request["calls"].size());
    return json{{"results", results}};
  }
  std::atomic<int> requests{0}, calls_in_batches{0};
  std::atomic<bool> unreachable{false};

 private:
  Result<json> Answer(const json& call) {
    if (call.value("language", "") == "cobol") return Invalid("unknown language `cobol`");
    return json{{"stdout", name_ + ":" + std::to_string(call.value("n", -1))}};
  }
  std::string name_;
};

struct Cluster {
  std::map<std::string, std::unique_ptr<CallNode>> nodes;
  std::map<std::string, NodeAdmin> admin;
  std::set<std::string> without_fncall;

  CallNode* Add(const std::string& name) {
    return (nodes[name] = std::make_unique<CallNode>(name)).get();
  }
  ClusterCalls Calls() {
    return ClusterCalls(
        [this] {
          std::vector<NodeView> out;
          for (const auto& [name, n] : nodes) {
            NodeView v;
            v.record.name = name;
            v.record.backends = {runtime::BackendKind::kContainer};
            if (!without_fncall.count(name))
              v.record.backends.insert(runtime::BackendKind::kFncall);
            v.admin = admin[name];
            out.push_back(v);
          }
          return out;
        },
        [this](const std::string& name) -> Result<node::NodeApi*> {
          auto it = nodes.find(name);
          if (it == nodes.end()) return Status(Code::kNotFound, "node", name, "gone");
          return static_cast<node::NodeApi*>(it->second.get());
        });
  }
};

TEST(ClusterCalls, ACallGoesToAFncallNodeAndItsAnswerComesBackWhole) {
  Cluster c;
  c.Add("a");
  c.Add("b");
  c.without_fncall.insert("a");
  auto calls = c.Calls();
  auto r = calls.Call({{"language", "python"}, {"code", "print(1)"}, {"n", 7}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["stdout"], "b:7");
  EXPECT_EQ(c.nodes["a"]->requests, 0);
  // The node's refusal of the call itself is the answer: not tried elsewhere.
  auto bad = calls.Call({{"language", "cobol"}, {"code", "x"}});
  EXPECT_EQ(bad.status().code(), Code::kInvalid);
  EXPECT_EQ(c.nodes["b"]->requests, 2);
  EXPECT_EQ(calls.Call(json::array()).status().code(), Code::kInvalid);
}

TEST(ClusterCalls, AnUnreachableNodeIsPassedOverAndNoNodeIsUnavailable) {
  Cluster c;
  c.Add("a")->unreachable = true;
  c.Add("b");
  auto calls = c.Calls();
  for (int i = 0; i < 5; ++i) {
    auto r = calls.Call({{"language", "python"}, {"code", ""}, {"n", i}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)["stdout"], "b:" + std::to_string(i));
  }
  c.nodes["b"]->unreachable = true;
  auto r = calls.Call({{"language", "python"}, {"code", ""}});
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_GT(r.status().retry_after_s(), 0);

  // Cordoned, draining or without fncall: no candidate at all.
  Cluster none;
  none.Add("x");
  none.admin["x"].cordoned = true;
  auto r2 = none.Calls().Call({{"language", "python"}, {"code", ""}});
  EXPECT_EQ(r2.status().code(), Code::kUnavailable);
  EXPECT_NE(r2.status().message().find("no ready node runs fncall"), std::string::npos);
}

TEST(ClusterCalls, OneImageKeepsToTheSameNodeWhenNothingRuns) {
  Cluster c;
  for (auto n : {"a", "b", "c", "d"}) c.Add(n);
  auto calls = c.Calls();
  std::string first;
  for (int i = 0; i < 10; ++i) {
    auto r = calls.Call({{"language", "python"}, {"code", ""}, {"image", "runner:1"}});
    ASSERT_TRUE(r.ok());
    const std::string node = (*r)["stdout"].get<std::string>().substr(0, 1);
    if (first.empty()) first = node;
    EXPECT_EQ(node, first);  // its runners are warm there
  }
}

TEST(ClusterCalls, ABatchIsSharedOutAndComesBackInOrder) {
  Cluster c;
  for (auto n : {"a", "b", "c"}) c.Add(n);
  c.nodes["c"]->unreachable = true;  // its share goes to another node
  auto calls = c.Calls();
  json batch = {{"calls", json::array()}};
  for (int i = 0; i < 100; ++i) batch["calls"].push_back({{"language", "python"}, {"n", i}});
  batch["calls"][42]["language"] = "cobol";
  auto r = calls.CallBatch(batch);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)["results"].size(), 100u);
  for (int i = 0; i < 100; ++i) {
    const json& one = (*r)["results"][i];
    if (i == 42) {
      EXPECT_TRUE(one.contains("error")) << one.dump();
      continue;
    }
    const std::string out = one["stdout"];
    EXPECT_EQ(out.substr(2), std::to_string(i)) << out;
    EXPECT_NE(out[0], 'c');
  }
  // Every node that could took a share.
  EXPECT_GT(c.nodes["a"]->calls_in_batches, 0);
  EXPECT_GT(c.nodes["b"]->calls_in_batches, 0);
  EXPECT_EQ(c.nodes["a"]->calls_in_batches + c.nodes["b"]->calls_in_batches, 100);

  // A small batch stays whole; a malformed one is refused before any node sees it.
  auto small = calls.CallBatch({{"calls", {{{"n", 1}}, {{"n", 2}}}}});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)["results"].size(), 2u);
  EXPECT_EQ(calls.CallBatch({{"calls", 3}}).status().code(), Code::kInvalid);
  EXPECT_EQ(calls.CallBatch({{"calls", json::array()}, {"x", 1}}).status().code(), Code::kInvalid);
  json big = {{"calls", json::array()}};
  for (size_t i = 0; i <= fncall::kMaxBatchCalls; ++i) big["calls"].push_back(json::object());
  EXPECT_EQ(calls.CallBatch(big).status().code(), Code::kInvalid);
  EXPECT_EQ((*calls.CallBatch({{"calls", json::array()}}))["results"], json::array());
}

TEST(ClusterCalls, ABatchNoNodeCanRunGivesEachCallTheError) {
  Cluster c;
  c.Add("a")->unreachable = true;
  auto calls = c.Calls();
  json batch = {{"calls", json::array()}};
  for (int i = 0; i < 20; ++i) batch["calls"].push_back({{"n", i}});
  auto r = calls.CallBatch(batch);
  ASSERT_TRUE(r.ok());
  for (const auto& one : (*r)["results"]) EXPECT_EQ(one["error"]["code"], "unavailable");
  calls.Shutdown();
  EXPECT_EQ(calls.Call({{"n", 1}}).status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace warren::cluster
