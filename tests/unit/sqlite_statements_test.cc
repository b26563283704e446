// SqliteStatements: a statement compiled once serves every later use, each from a clean start.
#include "server/sqlite_statements.h"

#include <gtest/gtest.h>

namespace warren::server {
namespace {

class SqliteStatementsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sqlite3_open(":memory:", &db_), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db_, "CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
    stmts_ = std::make_unique<SqliteStatements>(db_);
  }
  void TearDown() override {
    stmts_.reset();  // finalized first, or the close fails with statements open
    EXPECT_EQ(sqlite3_close(db_), SQLITE_OK);
  }
  void Put(const std::string& k, int64_t v) {
    auto st = stmts_->Get("INSERT INTO t (k, v) VALUES (?, ?)");
    ASSERT_TRUE(st.ok());
    ASSERT_EQ(st.Bind(1, k).Bind(2, v).Step(), SQLITE_DONE);
  }
  sqlite3* db_ = nullptr;
  std::unique_ptr<SqliteStatements> stmts_;
};

TEST_F(SqliteStatementsTest, EachUseStartsAfreshWithItsOwnBindings) {
  Put("a", 1);
  Put("b", 2);
  Put("c", 3);
  for (int round = 0; round < 2; ++round) {
    // Left after its first row: the next use must start from the first row again.
    auto st = stmts_->Get("SELECT k, v FROM t ORDER BY k");
    ASSERT_EQ(st.Step(), SQLITE_ROW);
    EXPECT_EQ(st.Text(0), "a");
    EXPECT_EQ(st.Int(1), 1);
  }
  {
    auto st = stmts_->Get("SELECT v FROM t WHERE k = ?");
    ASSERT_EQ(st.Bind(1, "b").Step(), SQLITE_ROW);
    EXPECT_EQ(st.Int(0), 2);
  }
  {
    // The binding of the last use is gone: an unbound parameter is NULL, which matches nothing.
    auto st = stmts_->Get("SELECT v FROM t WHERE k = ?");
    EXPECT_EQ(st.Step(), SQLITE_DONE);
  }
  auto st = stmts_->Get("SELECT MAX(v) FROM t WHERE k = ?");
  ASSERT_EQ(st.Bind(1, "zz").Step(), SQLITE_ROW);
  EXPECT_TRUE(st.IsNull(0));
}

TEST_F(SqliteStatementsTest, AStatementLeftMidwayHoldsNoTransaction) {
  Put("a", 1);
  Put("b", 2);
  {
    auto st = stmts_->Get("SELECT k FROM t");
    ASSERT_EQ(st.Step(), SQLITE_ROW);
  }
  // A statement still running on the table would make this fail: "database table is locked".
  ASSERT_EQ(sqlite3_exec(db_, "DROP TABLE t", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db_);
}

TEST_F(SqliteStatementsTest, SqlThatDoesNotCompileIsReportedEachTimeAndNotKept) {
  for (int i = 0; i < 2; ++i) {
    auto st = stmts_->Get("SELECT col FROM absent");
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.Step(), SQLITE_MISUSE);
    EXPECT_EQ(st.Text(0), "");
  }
  // Made valid later (the table now exists): the same SQL compiles at its next use.
  ASSERT_EQ(sqlite3_exec(db_, "CREATE TABLE absent (col TEXT)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  auto st = stmts_->Get("SELECT col FROM absent");
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(st.Step(), SQLITE_DONE);
}

}  // namespace
}  // namespace warren::server
