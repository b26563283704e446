#include "node/exec_record.h"

#include <gtest/gtest.h>

#include <set>

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

TEST(ExecBook, RefusesPastTheRunningCapAndDropsTheOldestEndedFirst) {
  ExecBook book;
  auto make = [](int i) {
    return std::make_shared<ExecRecord>("ex-" + std::to_string(i), "sb-1", 1000, false);
  };
  // Two running (the oldest two), then three ended with 100 bytes each.
  std::vector<std::shared_ptr<ExecRecord>> recs;
  for (int i = 0; i < 5; ++i) {
    recs.push_back(make(i));
    ASSERT_TRUE(book.Admit(recs.back(), 8, 100, 1 << 20).ok());
    recs.back()->AppendOutput(1, std::string(100, 'x'));
    if (i >= 2) recs.back()->Finish({});
  }
  EXPECT_EQ(recs[0]->bytes(), 100u);
  EXPECT_TRUE(recs[2]->done());
  EXPECT_FALSE(recs[0]->done());
  EXPECT_EQ(book.Running(), 2u);
  // A cap of 2 running: refused, and nothing kept changed.
  Status st = book.Admit(make(5), 2, 100, 1 << 20);
  EXPECT_EQ(st.code(), Code::kQuota) << st.ToString();
  EXPECT_EQ(book.records().size(), 5u);
  // Keep 3 records: the running ones stay whatever their age; the oldest ended ones go.
  ASSERT_TRUE(book.Admit(make(6), 8, 3, 1 << 20).ok());
  EXPECT_EQ(book.records().size(), 3u);
  EXPECT_TRUE(book.Find("ex-0") && book.Find("ex-1") && book.Find("ex-6"));
  EXPECT_FALSE(book.Find("ex-2"));
  // A bound on bytes held: the running ones' 200 bytes pass 150, but they are never dropped.
  recs[0]->Finish({});
  ASSERT_TRUE(book.Admit(make(7), 8, 100, 150).ok());
  EXPECT_FALSE(book.Find("ex-0")) << "ended, oldest: dropped for the bytes bound";
  EXPECT_TRUE(book.Find("ex-1") && book.Find("ex-6") && book.Find("ex-7"));
}

// The output total is kept as a running sum: after thousands of records come and go, with
// output arriving before and after they are admitted and some adopted ready-made, the bound on
// bytes still holds exactly where a full count says it should.
TEST(ExecBook, ItsRunningTotalsMatchAFullCountOverManyExecs) {
  ExecBook book;
  constexpr uint64_t kKeepBytes = 50'000;
  std::vector<std::shared_ptr<ExecRecord>> running;
  for (int i = 0; i < 3000; ++i) {
    auto rec = std::make_shared<ExecRecord>("ex-" + std::to_string(i), "sb-1", 1 << 20, false);
    if (i % 97 == 0) {
      rec->AppendOutput(1, std::string(static_cast<size_t>(i % 500), 'a'));
      rec->Finish({});
      book.Adopt(rec);
    } else {
      std::set<std::string> done_before;
      for (const auto& [id, r] : book.records())
        if (r->done()) done_before.insert(id);
      ASSERT_TRUE(book.Admit(rec, 16, 1024, kKeepBytes).ok()) << i;
      // Right after an admit, the book is within both bounds, or holds no record that had
      // finished before it (only those may go).
      uint64_t held = 0;
      for (const auto& [id, r] : book.records()) held += r->bytes();
      if (held > kKeepBytes || book.records().size() > 1024)
        for (const auto& [id, r] : book.records()) EXPECT_FALSE(done_before.count(id)) << i;
      rec->AppendOutput(1 + i % 2, std::string(static_cast<size_t>(i % 300), 'b'));
      running.push_back(rec);
    }
    // Finish all but the 8 most recent, in an order other than their start.
    while (running.size() > 8) {
      running[running.size() % 3]->Finish({});
      running.erase(running.begin() + static_cast<long>(running.size() % 3));
    }
    uint64_t live = 0;
    for (const auto& [id, r] : book.records()) live += !r->done();
    EXPECT_EQ(live, book.Running()) << i;
  }
  // One more admit with everything finished brings the book within both bounds.
  for (auto& r : running) r->Finish({});
  auto last = std::make_shared<ExecRecord>("ex-last", "sb-1", 1000, false);
  ASSERT_TRUE(book.Admit(last, 16, 1024, kKeepBytes).ok());
  uint64_t held = 0;
  for (const auto& [id, r] : book.records()) held += r->bytes();
  EXPECT_LE(held, kKeepBytes);
  EXPECT_LE(book.records().size(), 1024u);
  EXPECT_EQ(book.Running(), 1u);
}

}  // namespace
}  // namespace warren::node
