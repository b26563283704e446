#include "server/sqlite_statements.h"

namespace warren::server {

SqliteStatements::~SqliteStatements() {
  for (auto& [sql, s] : stmts_) sqlite3_finalize(s);
}

SqliteStatements::Use SqliteStatements::Get(const char* sql) {
  if (auto it = stmts_.find(std::string_view(sql)); it != stmts_.end())
    return Use(it->second, SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  // PERSISTENT: kept for long, so SQLite takes its memory from the heap, not its lookaside.
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s);
    return Use(nullptr, rc);
  }
  stmts_.emplace(sql, s);
  return Use(s, rc);
}

SqliteStatements::Use::~Use() {
  if (!s_) return;
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
}

SqliteStatements::Use& SqliteStatements::Use::Bind(int i, std::string_view v) {
  sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}

SqliteStatements::Use& SqliteStatements::Use::Bind(int i, int64_t v) {
  sqlite3_bind_int64(s_, i, v);
  return *this;
}

std::string SqliteStatements::Use::Text(int col) {
  auto* p = sqlite3_column_text(s_, col);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<size_t>(sqlite3_column_bytes(s_, col)))
           : "";
}

}  // namespace warren::server
