// The API server's services, each alone: the call gate (quotas and counts in front of the
// fncall service), the reaper (TTL, idle timeout) on a clock the test drives, and the metrics
// parts.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "base/ids.h"
#include "fake_node.h"
#include "node/fncall/call_pool.h"
#include "server/call_gate.h"
#include "server/metrics.h"
#include "server/metrics_history.h"
#include "server/reaper.h"

namespace warren::server {
namespace {

Principal Caller(int64_t max_calls) {
  Principal p{"caller", {"call"}, {}};
  p.quotas.max_calls = max_calls;
  return p;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(CallGate, OffUntilAServiceIsSet) {
  QuotaTracker quota;
  CallGate gate(&quota);
  EXPECT_FALSE(gate.enabled());
  EXPECT_EQ(gate.Call(Caller(4), R"({"language":"python","code":""})").status().code(),
            Code::kUnavailable);
  EXPECT_EQ(gate.CallBatch(Caller(4), R"({"calls":[]})").status().code(), Code::kUnavailable);
  EXPECT_TRUE(Has(gate.RenderMetrics(), "warren_calls_admitted_total 0"));
}

TEST(CallGate, ABatchCountsAsManyCallsAsItHolds) {
  testing::FakeNode node;
  // No runner image resolves: every admitted call fails there, never reaching the node.
  fncall::CallService service(
      &node, [](const std::string&) -> Result<std::vector<std::string>> { return Invalid("none"); },
      {});
  QuotaTracker quota;
  CallGate gate(&quota);
  gate.SetService(&service);
  EXPECT_EQ(gate.Call(Caller(4), "not json").status().code(), Code::kInvalid);
  // Admitted (then refused by the service: no image), and its quota share given back.
  EXPECT_FALSE(gate.Call(Caller(4), R"j({"language":"python","code":"print(1)"})j").ok());
  EXPECT_EQ(quota.CallsRunning(), 0);
  // Five calls in one batch against max_calls 4: it could never run.
  std::string five = R"({"calls":[{},{},{},{},{}]})";
  EXPECT_EQ(gate.CallBatch(Caller(4), five).status().code(), Code::kInvalid);
  const std::string m = gate.RenderMetrics();
  EXPECT_TRUE(Has(m, "warren_calls_admitted_total 1")) << m;
  EXPECT_TRUE(Has(m, "warren_calls_refused_total 5")) << m;
  EXPECT_TRUE(Has(m, "warren_call_seconds_count 1")) << m;
  EXPECT_TRUE(Has(m, "warren_calls_running 0")) << m;
  service.Shutdown();
}

// A fncall service that answers what the test scripted.
class ScriptedCalls : public fncall::Calls {
 public:
  Result<json> Call(const json& rq) override {
    if (rq.value("code", "") == "fail") return Internal("call", "runner", "died");
    return json{{"verdict", rq.value("code", "ok")}};
  }
  Result<json> CallBatch(const json& rq) override {
    json out = json::array();
    for (const json& c : rq["calls"]) {
      auto r = Call(c);
      out.push_back(r.ok() ? *r : json{{"error", {{"code", "internal"}}}});
    }
    return json{{"results", out}};
  }
  json Stats() const override {
    return {{"runners", json::array({{{"id", "r1"}, {"inflight", 0}}})}, {"calls", 0}};
  }
  void Shutdown() override {}
};

TEST(CallGate, CountsEachCallsVerdictForTheDashboard) {
  ScriptedCalls calls;
  QuotaTracker quota;
  CallGate gate(&quota);
  gate.SetService(&calls);
  ASSERT_TRUE(gate.Call(Caller(8), R"({"code":"ok"})").ok());
  ASSERT_TRUE(gate.Call(Caller(8), R"({"code":"wrong_answer"})").ok());
  EXPECT_FALSE(gate.Call(Caller(8), R"({"code":"fail"})").ok());
  ASSERT_TRUE(
      gate.CallBatch(Caller(8), R"({"calls":[{"code":"ok"},{"code":"timeout"},{"code":"fail"}]})")
          .ok());
  const CallGate::Stats st = gate.stats();
  EXPECT_EQ(st.admitted, 6u);
  EXPECT_EQ(st.verdicts, (std::map<std::string, uint64_t>{
                             {"ok", 2}, {"wrong_answer", 1}, {"timeout", 1}, {"error", 2}}));
  EXPECT_TRUE(Has(gate.RenderMetrics(), "warren_call_verdicts_total{verdict=\"ok\"} 2"));
}

TEST(MetricsHistory, KeepsTheLastSamplesAndAddsOneTakenNow) {
  uint64_t creates = 0;
  MetricsHistory history(
      [&] {
        FleetSample s;
        s.creates = creates;
        s.sandboxes["running"] = static_cast<int64_t>(creates);
        return s;
      },
      std::chrono::hours(1), 360);
  for (int i = 0; i < 400; ++i) {
    creates = static_cast<uint64_t>(i);
    history.SampleNow();
  }
  creates = 1000;
  auto samples = history.Samples();
  ASSERT_EQ(samples.size(), 361u);
  EXPECT_EQ(samples.front().creates, 40u);  // the 40 oldest went
  EXPECT_EQ(samples[359].creates, 399u);
  EXPECT_EQ(samples.back().creates, 1000u);
  EXPECT_GE(samples.back().unix_time, samples.front().unix_time);
  EXPECT_GT(samples.front().unix_time, 1.7e9);
  // The thread samples at once when started and stops promptly (its interval is an hour).
  history.Start();
  history.Stop();
}

struct ReaperProbe {
  std::map<std::string, int> running;
  std::vector<std::string> removed;
  int ticks = 0;
  SandboxReaper::Hooks Hooks() {
    return {[this](const std::string& id) { return running[id]; },
            [this](const std::string& id) { removed.push_back(id); }, [this] { ++ticks; }};
  }
};

TEST(SandboxReaper, ATtlEndsTheSandboxOnceAndForgetsIt) {
  ReaperProbe probe;
  SandboxReaper reaper(probe.Hooks());
  const double t0 = NowSeconds();
  reaper.Track("sb-a", 10, std::nullopt);
  reaper.Track("sb-b", 100, std::nullopt);
  reaper.Sweep(t0 + 9);
  EXPECT_TRUE(probe.removed.empty());
  reaper.Sweep(t0 + 11);
  EXPECT_EQ(probe.removed, std::vector<std::string>{"sb-a"});
  reaper.Sweep(t0 + 12);  // handed over once
  EXPECT_EQ(probe.removed.size(), 1u);
  reaper.Forget("sb-b");  // deleted by its owner
  reaper.Sweep(t0 + 1000);
  EXPECT_EQ(probe.removed.size(), 1u);
  EXPECT_EQ(probe.ticks, 4);
}

TEST(SandboxReaper, IdleMeansUnusedAndNothingRunning) {
  ReaperProbe probe;
  SandboxReaper reaper(probe.Hooks());
  const double t0 = NowSeconds();
  reaper.Track("sb-idle", 3600, 5.0);
  reaper.Track("sb-busy", 3600, 5.0);
  probe.running["sb-busy"] = 1;
  reaper.Sweep(t0 + 4);
  EXPECT_TRUE(probe.removed.empty());
  reaper.Sweep(t0 + 6);
  EXPECT_EQ(probe.removed, std::vector<std::string>{"sb-idle"});
  // The busy one was seen busy at t0+6: its idle time starts there, once its command ends.
  probe.running["sb-busy"] = 0;
  reaper.Sweep(t0 + 10);
  EXPECT_EQ(probe.removed.size(), 1u);
  reaper.Sweep(t0 + 11.5);
  EXPECT_EQ(probe.removed.back(), "sb-busy");
}

TEST(Metrics, EveryBackendStateAndErrorCodeHasItsSample) {
  SandboxTable::Counts counts;
  counts[{runtime::BackendKind::kContainer, SandboxState::kRunning}] = 3;
  const std::string s = RenderSandboxMetrics(counts);
  EXPECT_TRUE(Has(s, R"(warren_sandboxes{backend="container",state="running"} 3)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_sandboxes{backend="fncall",state="paused"} 0)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_sandboxes{backend="vm",state="failed"} 0)")) << s;
  ErrorCounts errors;
  errors.Count(Code::kQuota);
  errors.Count(Code::kQuota);
  const std::string e = errors.Render();
  EXPECT_TRUE(Has(e, R"(warren_api_errors_total{code="quota"} 2)")) << e;
  EXPECT_TRUE(Has(e, R"(warren_api_errors_total{code="internal"} 0)")) << e;
}

TEST(Metrics, NodeSeriesComeFromItsInfo) {
  nlohmann::json info = {
      {"sandboxes", 7},
      {"layer_mounts", 2},
      {"uid_slots_used", 7},
      {"uid_slots", 100},
      {"network",
       {{"proxy",
         {{"upstream_bytes", 10},
          {"cache_bytes", 20},
          {"refused", 1},
          {"registries",
           {{"npm",
             {{"hit", 9}, {"collapsed", 3}, {"upstream_bytes", 100}, {"cache_bytes", 900}}}}},
          {"sandboxes", {{"sb-x", {{"upstream_bytes", 4}, {"connections", 2}}}}}}},
        {"dns", {{"answered", 5}}}}}};
  const std::string s = RenderNodeMetrics({info});
  EXPECT_TRUE(Has(s, "warren_node_sandboxes 7")) << s;
  EXPECT_TRUE(Has(s, R"(warren_node_uid_slots{state="total"} 100)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_egress_bytes_total{source="cache"} 20)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_egress_sandbox_bytes_total{sandbox="sb-x",source="upstream"} 4)"))
      << s;
  EXPECT_TRUE(Has(s, R"(warren_egress_connections_total{sandbox="sb-x"} 2)")) << s;
  EXPECT_TRUE(Has(s, "warren_egress_refused_total 1")) << s;
  EXPECT_TRUE(Has(s, R"(warren_package_cache_requests_total{registry="npm",result="hit"} 9)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_package_cache_requests_total{registry="npm",result="collapsed"} 3)"))
      << s;
  EXPECT_TRUE(Has(s, R"(warren_package_cache_requests_total{registry="npm",result="miss"} 0)"))
      << s;
  EXPECT_TRUE(Has(s, R"(warren_package_cache_bytes_total{registry="npm",source="cache"} 900)"))
      << s;
  EXPECT_TRUE(Has(s, R"(warren_dns_queries_total{result="answered"} 5)")) << s;
}

// A cluster's nodes (their records: capacity, reserved): every family once, each sample
// labelled with its node, memory available being what placement has not reserved.
TEST(Metrics, ClusterNodesAreLabelledAndEachFamilyTypedOnce) {
  auto node = [](const char* name, int64_t reserved_mb) {
    return nlohmann::json{{"name", name},
                          {"state", "ready"},
                          {"sandboxes", 3},
                          {"capacity", {{"cpu_milli", 192000}, {"memory_mb", 1024}}},
                          {"reserved", {{"cpu_milli", 500}, {"memory_mb", reserved_mb}}}};
  };
  const std::string s = RenderNodeMetrics({node("n1", 256), node("n2", 0)});
  size_t types = 0;
  for (size_t at = 0; (at = s.find("# TYPE warren_node_memory_bytes ", at)) != std::string::npos;
       ++at)
    ++types;
  EXPECT_EQ(types, 1u) << s;
  EXPECT_TRUE(Has(s, R"(warren_node_sandboxes{node="n1"} 3)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_node_cpus{node="n2"} 192)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_node_memory_bytes{node="n1",kind="available"} 805306368)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_node_memory_bytes{node="n2",kind="total"} 1073741824)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_node_reserved_cpus{node="n1"} 0.5)")) << s;
}

// What a cluster's nodes report of themselves (cluster/node_reports.h) rides along: egress and
// fncall runners, per node. warren serve's runners are its CallGate's to render.
TEST(Metrics, ClusterNodeReportsGiveEgressAndRunnersPerNode) {
  nlohmann::json n = {
      {"name", "n1"},
      {"capacity", {{"cpu_milli", 2000}, {"memory_mb", 1024}}},
      {"network", {{"proxy", {{"upstream_bytes", 10}, {"cache_bytes", 7}}}}},
      {"fncall", {{"calls", 12}, {"runs", 14}, {"runner_starts", 2}, {"runners", {1, 2}}}}};
  const std::string s = RenderNodeMetrics({n});
  EXPECT_TRUE(Has(s, R"(warren_egress_bytes_total{node="n1",source="cache"} 7)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_calls_total{node="n1"} 12)")) << s;
  EXPECT_TRUE(Has(s, R"(warren_fncall_runners{node="n1"} 2)")) << s;
  n.erase("capacity");  // warren serve's one node: no label, and no runner series here
  EXPECT_FALSE(Has(RenderNodeMetrics({n}), "warren_calls_total")) << RenderNodeMetrics({n});
}

}  // namespace
}  // namespace warren::server
