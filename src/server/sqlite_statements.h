// The prepared statements of one SQLite connection, each compiled once and kept for the
// connection's life. Compiling a statement (sqlite3_prepare) parsed and planned its SQL on
// every query: ~2.5% of `warren serve`'s CPU in a loop of create -> exec -> delete, and a part
// of every exec's round trip (its sandbox record is read each time).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace warren::server {

class SqliteStatements {
 public:
  explicit SqliteStatements(sqlite3* db) : db_(db) {}
  ~SqliteStatements();
  SqliteStatements(const SqliteStatements&) = delete;
  SqliteStatements& operator=(const SqliteStatements&) = delete;

  // One use of a statement: bound, stepped, and reset with its bindings cleared when it goes
  // (a statement left mid-way would keep its read transaction open). The caller serializes
  // uses of the connection, and never holds two uses of the same SQL at once.
  class Use {
   public:
    Use(Use&& o) noexcept : s_(o.s_), rc_(o.rc_) { o.s_ = nullptr; }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    ~Use();
    // Whether the statement compiled; a step of one that did not returns SQLITE_MISUSE.
    bool ok() const { return rc_ == SQLITE_OK; }
    Use& Bind(int i, std::string_view v);
    Use& Bind(int i, int64_t v);
    int Step() { return sqlite3_step(s_); }
    std::string Text(int col);
    int64_t Int(int col) { return sqlite3_column_int64(s_, col); }
    bool IsNull(int col) { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

   private:
    friend class SqliteStatements;
    Use(sqlite3_stmt* s, int rc) : s_(s), rc_(rc) {}
    sqlite3_stmt* s_;
    int rc_;
  };

  // The statement for `sql`, compiled at its first use. One that fails to compile is not kept,
  // so the next use tries again (and reports the connection's error again).
  Use Get(const char* sql);

 private:
  // Looked up by the SQL's text without making a std::string of it per query.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*, TextHash, std::equal_to<>> stmts_;
};

}  // namespace warren::server
