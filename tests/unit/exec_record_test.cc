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

}  // namespace
}  // namespace warren::node
