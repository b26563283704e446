#include "node/exec_record.h"

#include <gtest/gtest.h>

namespace warren::node {
namespace {

TEST(ExecRecord, CapsEachStreamAndSequencesChunks) {
  ExecRecord r("ex-1", "sb-1", 10, false);
  r.AppendOutput(1, "hello ");
  r.AppendOutput(2, "oops");
  r.AppendOutput(1, "world, and more");
  auto snap = r.Poll(0, nullptr);
  ASSERT_EQ(snap.chunks.size(), 3u);
  EXPECT_EQ(snap.chunks[2].seq, 3u);
  EXPECT_EQ(snap.chunks[2].data, "worl");  // 10 bytes of stdout in all
  EXPECT_EQ(r.Poll(2, nullptr).chunks.size(), 1u);
  bool woke = false;
  EXPECT_TRUE(r.Poll(3, [&] { woke = true; }).chunks.empty());
  r.Finish({});
  EXPECT_TRUE(woke);
  auto j = r.ResultJson();
  EXPECT_EQ(j["stdout"], "hello worl");
  EXPECT_EQ(j["stdout_truncated"], true);
  EXPECT_EQ(j["stderr_truncated"], false);
  EXPECT_EQ(j["state"], "exited");
}

TEST(ExecRecord, ASandboxWideBudgetBoundsAllRecords) {
  auto budget = std::make_shared<OutputBudget>(100);
  {
    ExecRecord a("ex-a", "sb", 1000, false, budget), b("ex-b", "sb", 1000, false, budget);
    a.AppendOutput(1, std::string(80, 'a'));
    b.AppendOutput(1, std::string(80, 'b'));
    EXPECT_EQ(a.bytes() + b.bytes(), 100u);
    EXPECT_EQ(budget->used.load(), 100u);
    EXPECT_EQ(b.ResultJson()["stdout_truncated"], true);
  }
  EXPECT_EQ(budget->used.load(), 0u);  // dropped records give their bytes back
}

TEST(AdmitExec, RefusesPastTheRunningCapAndDropsTheOldestEndedFirst) {
  ExecMap execs;
  std::vector<std::string> order;
  auto make = [](int i) {
    return std::make_shared<ExecRecord>("ex-" + std::to_string(i), "sb-1", 1000, false);
  };
  // Two running (the oldest two), then three ended with 100 bytes each.
  std::vector<std::shared_ptr<ExecRecord>> recs;
  for (int i = 0; i < 5; ++i) {
    recs.push_back(make(i));
    ASSERT_TRUE(AdmitExec(&execs, &order, recs.back(), 8, 100, 1 << 20).ok());
    recs.back()->AppendOutput(1, std::string(100, 'x'));
    if (i >= 2) recs.back()->Finish({});
  }
  EXPECT_EQ(recs[0]->bytes(), 100u);
  EXPECT_TRUE(recs[2]->done());
  EXPECT_FALSE(recs[0]->done());
  // A cap of 2 running: refused, and nothing kept changed.
  Status st = AdmitExec(&execs, &order, make(5), 2, 100, 1 << 20);
  EXPECT_EQ(st.code(), Code::kQuota) << st.ToString();
  EXPECT_EQ(execs.size(), 5u);
  // Keep 3 records: the running ones stay whatever their age; the oldest ended ones go.
  ASSERT_TRUE(AdmitExec(&execs, &order, make(6), 8, 3, 1 << 20).ok());
  EXPECT_EQ(execs.size(), 3u);
  EXPECT_TRUE(execs.count("ex-0") && execs.count("ex-1") && execs.count("ex-6"));
  EXPECT_EQ(order, (std::vector<std::string>{"ex-0", "ex-1", "ex-6"}));
  // A bound on bytes held: the running ones' 200 bytes pass 150, but they are never dropped.
  recs[0]->Finish({});
  ASSERT_TRUE(AdmitExec(&execs, &order, make(7), 8, 100, 150).ok());
  EXPECT_FALSE(execs.count("ex-0")) << "ended, oldest: dropped for the bytes bound";
  EXPECT_TRUE(execs.count("ex-1") && execs.count("ex-6") && execs.count("ex-7"));
}

}  // namespace
}  // namespace warren::node
