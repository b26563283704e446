#include "node/exec_spill.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace warren::node {
namespace {

class ExecJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/warren-journal-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/sb-1.journal";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  uint64_t FileSize() const {
    struct stat st;
    return stat(path_.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }
  static nlohmann::json Meta(const std::string& id) {
    return {{"id", id}, {"binary", false}, {"started_unix", 1.0}};
  }
  std::string dir_, path_;
};

TEST_F(ExecJournalTest, NothingOnDiskUntilTheFirstExec) {
  auto j = std::make_shared<ExecJournal>(path_);
  EXPECT_FALSE(std::filesystem::exists(path_));
  std::vector<ExecSpill::Loaded> loaded;
  ExecJournal::Load(path_, &loaded);
  EXPECT_TRUE(loaded.empty());
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(ExecJournalTest, RecordsComeBackInOrderWithOutputAndOutcome) {
  {
    auto j = std::make_shared<ExecJournal>(path_);
    auto a = *j->Begin(Meta("ex-a"));
    auto b = *j->Begin(Meta("ex-b"));
    a->Append(1, "hello ", 6);
    b->Append(2, "err", 10);  // 7 bytes received but not kept
    a->Append(1, "world", 5);
    a->Finish({{"exit_code", 3}});
    // The daemon dies here: nothing is forgotten.
  }
  std::vector<ExecSpill::Loaded> loaded;
  auto j = ExecJournal::Load(path_, &loaded);
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].meta["id"], "ex-a");
  ASSERT_EQ(loaded[0].frames.size(), 2u);
  EXPECT_EQ(loaded[0].frames[0].kept + loaded[0].frames[1].kept, "hello world");
  EXPECT_EQ(loaded[0].meta["outcome"]["exit_code"], 3);
  EXPECT_EQ(loaded[1].meta["id"], "ex-b");
  EXPECT_FALSE(loaded[1].meta.contains("outcome"));  // still running
  ASSERT_EQ(loaded[1].frames.size(), 1u);
  EXPECT_EQ(loaded[1].frames[0].stream, 2);
  EXPECT_EQ(loaded[1].frames[0].received, 10u);

  // A restored running exec goes on appending to the same journal; a new one gets its own.
  loaded[1].spill->Append(2, "more", 4);
  loaded[1].spill->Finish({{"exit_code", 0}});
  auto c = *j->Begin(Meta("ex-c"));
  c.reset();
  loaded.clear();
  std::vector<ExecSpill::Loaded> again;
  ExecJournal::Load(path_, &again);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[1].frames.back().kept, "more");
  EXPECT_EQ(again[1].meta["outcome"]["exit_code"], 0);
  EXPECT_EQ(again[2].meta["id"], "ex-c");
}

TEST_F(ExecJournalTest, ATornLastRecordIsCutOffAndLaterRecordsStillLoad) {
  {
    auto j = std::make_shared<ExecJournal>(path_);
    auto a = *j->Begin(Meta("ex-a"));
    a->Append(1, "kept", 4);
  }
  const uint64_t whole = FileSize();
  {
    // A daemon killed in the middle of a record: its header promises more than is there.
    int fd = open(path_.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    const char torn[] = {2, 1, 0, 0, 0, 100, 0, 0, 0, 1, 'x'};
    ASSERT_EQ(write(fd, torn, sizeof torn), static_cast<ssize_t>(sizeof torn));
    close(fd);
  }
  std::vector<ExecSpill::Loaded> loaded;
  auto j = ExecJournal::Load(path_, &loaded);
  ASSERT_EQ(loaded.size(), 1u);
  ASSERT_EQ(loaded[0].frames.size(), 1u);
  EXPECT_EQ(loaded[0].frames[0].kept, "kept");
  EXPECT_EQ(FileSize(), whole);  // cut back to the whole records
  loaded[0].spill->Append(1, " and after", 10);
  loaded.clear();
  std::vector<ExecSpill::Loaded> again;
  ExecJournal::Load(path_, &again);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].frames.size(), 2u);
  EXPECT_EQ(again[0].frames[1].kept, " and after");
}

TEST_F(ExecJournalTest, ForgottenExecsAreDroppedAndTheFileStaysSmall) {
  auto j = std::make_shared<ExecJournal>(path_);
  const std::string chunk(4096, 'o');
  auto keep = *j->Begin(Meta("ex-keep"));
  keep->Append(1, "survivor", 8);
  for (int i = 0; i < 2000; ++i) {
    auto s = *j->Begin(Meta("ex-" + std::to_string(i)));
    s->Append(1, chunk, chunk.size());
    s->Finish({{"exit_code", 0}});
    s->RemoveOnClose();
  }
  // 8 MiB were written; compaction keeps the file near what is live.
  EXPECT_LT(FileSize(), 3u << 20);
  EXPECT_EQ(FileSize(), j->size());
  std::vector<ExecSpill::Loaded> loaded;
  ExecJournal::Load(path_, &loaded);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].meta["id"], "ex-keep");
  EXPECT_EQ(loaded[0].frames[0].kept, "survivor");
}

TEST_F(ExecJournalTest, LoadingDropsForgottenRecords) {
  {
    auto j = std::make_shared<ExecJournal>(path_);
    auto a = *j->Begin(Meta("ex-a"));
    auto b = *j->Begin(Meta("ex-b"));
    a->Append(1, std::string(1000, 'a'), 1000);
    a->RemoveOnClose();
  }
  const uint64_t before = FileSize();
  std::vector<ExecSpill::Loaded> loaded;
  ExecJournal::Load(path_, &loaded);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].meta["id"], "ex-b");
  EXPECT_LT(FileSize() + 1000, before);
}

TEST_F(ExecJournalTest, DiscardRemovesTheFileAndRefusesNewExecs) {
  auto j = std::make_shared<ExecJournal>(path_);
  auto a = *j->Begin(Meta("ex-a"));
  j->Discard();
  EXPECT_FALSE(std::filesystem::exists(path_));
  a->Append(1, "late output", 11);  // goes nowhere, and does not bring the file back
  a->RemoveOnClose();
  a.reset();
  EXPECT_FALSE(std::filesystem::exists(path_));
  auto b = j->Begin(Meta("ex-b"));
  EXPECT_FALSE(b.ok());
  EXPECT_FALSE(std::filesystem::exists(path_));
}

}  // namespace
}  // namespace warren::node
