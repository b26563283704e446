#include "server/sqlite_state_store.h"

namespace warren::server {
namespace {

using Stmt = SqliteStatements::Use;

Status DbError(sqlite3* db, const std::string& op) {
  return Internal("sqlite " + op, "state.db", sqlite3_errmsg(db));
}

LayerRecord ReadLayer(Stmt& st) {
  LayerRecord r;
  r.name = st.Text(0);
  r.tag = st.Text(1);
  r.digest = st.Text(2);
  r.kind = st.Text(3);
  r.size = static_cast<uint64_t>(st.Int(4));
  r.created_at = st.Text(5);
  r.source = st.Text(6);
  return r;
}

}  // namespace

nlohmann::json LayerRecord::ToJson() const {
  return {{"name", name}, {"tag", tag},   {"ref", name + ":" + tag},  {"digest", digest},
          {"kind", kind}, {"size", size}, {"created_at", created_at}, {"source", source}};
}

Result<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path, bool durable) {
  auto s = WARREN_TRY(SqliteStateStore::Open(path, durable));
  return std::unique_ptr<StateStore>(std::move(s));
}

Result<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(const std::string& path,
                                                                 bool durable) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    Status st = Internal("sqlite open", path, db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<SqliteStateStore> s(new SqliteStateStore(db));
  sqlite3_busy_timeout(db, 5000);
  WARREN_RETURN_IF_ERROR(s->Exec("PRAGMA journal_mode=WAL"));
  WARREN_RETURN_IF_ERROR(
      s->Exec(durable ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  WARREN_RETURN_IF_ERROR(
      s->Exec("CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, state TEXT NOT NULL,"
              " created_at TEXT NOT NULL, doc TEXT NOT NULL)"));
  WARREN_RETURN_IF_ERROR(s->Exec(
      "CREATE TABLE IF NOT EXISTS layers (name TEXT NOT NULL, tag TEXT NOT NULL,"
      " digest TEXT NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL, created_at TEXT NOT NULL,"
      " source TEXT NOT NULL, PRIMARY KEY (name, tag))"));
  WARREN_RETURN_IF_ERROR(s->Exec(
      "CREATE TABLE IF NOT EXISTS docs (kind TEXT NOT NULL, id TEXT NOT NULL, doc TEXT NOT NULL,"
      " PRIMARY KEY (kind, id))"));
  WARREN_RETURN_IF_ERROR(
      s->Exec("CREATE TABLE IF NOT EXISTS steps (traj TEXT NOT NULL, step INTEGER NOT NULL,"
              " exec_id TEXT NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (traj, step))"));
  WARREN_RETURN_IF_ERROR(s->Exec("CREATE INDEX IF NOT EXISTS steps_by_exec ON steps (exec_id)"));
  return s;
}

SqliteStateStore::~SqliteStateStore() {
  stmts_.reset();  // finalized before the connection closes
  sqlite3_close(db_);
}

Status SqliteStateStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    Status st = Internal("sqlite exec", sql, err ? err : "");
    sqlite3_free(err);
    return st;
  }
  return Status::Ok();
}

Status SqliteStateStore::PutSandbox(const nlohmann::json& sb) {
  MutexLock lock(&mu_);
  Stmt st =
      stmts_->Get("INSERT OR REPLACE INTO sandboxes (id, state, created_at, doc) VALUES (?,?,?,?)");
  st.Bind(1, sb.value("id", ""))
      .Bind(2, sb.value("state", ""))
      .Bind(3, sb.value("created_at", ""))
      .Bind(4, sb.dump());
  if (st.Step() != SQLITE_DONE) return DbError(db_, "put sandbox");
  return Status::Ok();
}

Result<nlohmann::json> SqliteStateStore::GetSandbox(const std::string& id) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM sandboxes WHERE id = ?");
  st.Bind(1, id);
  if (st.Step() != SQLITE_ROW) return NotFound("sandbox", id);
  return nlohmann::json::parse(st.Text(0));
}

Result<std::string> SqliteStateStore::GetSandboxText(const std::string& id) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM sandboxes WHERE id = ?");
  st.Bind(1, id);
  const int rc = st.Step();
  if (rc == SQLITE_ROW) return st.Text(0);
  if (rc == SQLITE_DONE) return NotFound("sandbox", id);
  return DbError(db_, "get sandbox");
}

std::vector<nlohmann::json> SqliteStateStore::ListSandboxes() {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM sandboxes ORDER BY created_at, id");
  std::vector<nlohmann::json> out;
  while (st.Step() == SQLITE_ROW) out.push_back(nlohmann::json::parse(st.Text(0)));
  return out;
}

Result<std::vector<StateStore::StoredText>> SqliteStateStore::ReadSandboxTexts() {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT id, doc FROM sandboxes");
  std::vector<StoredText> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back({st.Text(0), st.Text(1)});
  if (rc != SQLITE_DONE) return DbError(db_, "list sandboxes");
  return out;
}

Status SqliteStateStore::RemoveSandbox(const std::string& id) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("DELETE FROM sandboxes WHERE id = ?");
  st.Bind(1, id);
  if (st.Step() != SQLITE_DONE) return DbError(db_, "remove sandbox");
  return Status::Ok();
}

Status SqliteStateStore::RemoveSandboxIf(const std::string& id, const std::string& stamp) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("DELETE FROM sandboxes WHERE id = ? AND doc = ?");
  st.Bind(1, id).Bind(2, stamp);
  if (st.Step() != SQLITE_DONE) return DbError(db_, "remove sandbox");
  if (sqlite3_changes(db_) == 0)
    return Status(Code::kConflict, "remove sandbox", id, "changed or gone meanwhile");
  return Status::Ok();
}

Result<StateStore::Stamped> SqliteStateStore::GetSandboxStamped(const std::string& id) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM sandboxes WHERE id = ?");
  st.Bind(1, id);
  if (st.Step() != SQLITE_ROW) return NotFound("sandbox", id);
  std::string text = st.Text(0);
  return Stamped{nlohmann::json::parse(text), std::move(text)};
}

Result<std::string> SqliteStateStore::PutSandboxIf(const nlohmann::json& sb,
                                                   const std::string& stamp) {
  MutexLock lock(&mu_);
  const std::string id = sb.value("id", "");
  // The stamp of a version is its text.
  std::string doc = sb.dump();
  if (stamp.empty()) {
    Stmt st = stmts_->Get("INSERT INTO sandboxes (id, state, created_at, doc) VALUES (?,?,?,?)");
    st.Bind(1, id).Bind(2, sb.value("state", "")).Bind(3, sb.value("created_at", "")).Bind(4, doc);
    const int rc = st.Step();
    if (rc == SQLITE_CONSTRAINT) return Status(Code::kConflict, "put sandbox", id, "exists");
    if (rc != SQLITE_DONE) return DbError(db_, "put sandbox");
    return doc;
  }
  Stmt st = stmts_->Get(
      "UPDATE sandboxes SET state = ?, created_at = ?, doc = ? WHERE id = ? AND doc = ?");
  st.Bind(1, sb.value("state", ""))
      .Bind(2, sb.value("created_at", ""))
      .Bind(3, doc)
      .Bind(4, id)
      .Bind(5, stamp);
  if (st.Step() != SQLITE_DONE) return DbError(db_, "put sandbox");
  if (sqlite3_changes(db_) == 0)
    return Status(Code::kConflict, "put sandbox", id, "changed meanwhile");
  return doc;
}

Status SqliteStateStore::PutLayer(const LayerRecord& r) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get(
      "INSERT OR REPLACE INTO layers (name, tag, digest, kind, size, created_at, source)"
      " VALUES (?,?,?,?,?,?,?)");
  st.Bind(1, r.name)
      .Bind(2, r.tag)
      .Bind(3, r.digest)
      .Bind(4, r.kind)
      .Bind(5, static_cast<int64_t>(r.size))
      .Bind(6, r.created_at)
      .Bind(7, r.source);
  layer_cache_.erase({r.name, r.tag});
  if (st.Step() != SQLITE_DONE) return DbError(db_, "put layer");
  return Status::Ok();
}

Result<LayerRecord> SqliteStateStore::GetLayer(const std::string& name, const std::string& tag) {
  MutexLock lock(&mu_);
  if (auto it = layer_cache_.find({name, tag}); it != layer_cache_.end()) return it->second;
  Stmt st = stmts_->Get(
      "SELECT name, tag, digest, kind, size, created_at, source FROM layers WHERE name = ? AND "
      "tag = ?");
  st.Bind(1, name).Bind(2, tag);
  if (st.Step() != SQLITE_ROW) return NotFound("image", name + ":" + tag);
  LayerRecord rec = ReadLayer(st);
  layer_cache_[{name, tag}] = rec;
  return rec;
}

std::vector<LayerRecord> SqliteStateStore::ListLayers() {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get(
      "SELECT name, tag, digest, kind, size, created_at, source FROM layers ORDER BY name, tag");
  std::vector<LayerRecord> out;
  while (st.Step() == SQLITE_ROW) out.push_back(ReadLayer(st));
  return out;
}

Status SqliteStateStore::RemoveLayer(const std::string& name, const std::string& tag) {
  MutexLock lock(&mu_);
  layer_cache_.erase({name, tag});
  Stmt st = stmts_->Get("DELETE FROM layers WHERE name = ? AND tag = ?");
  st.Bind(1, name).Bind(2, tag);
  if (st.Step() != SQLITE_DONE) return DbError(db_, "remove layer");
  if (sqlite3_changes(db_) == 0) return NotFound("image", name + ":" + tag);
  return Status::Ok();
}

int SqliteStateStore::LayerRefs(const std::string& digest) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT COUNT(*) FROM layers WHERE digest = ?");
  st.Bind(1, digest);
  return st.Step() == SQLITE_ROW ? static_cast<int>(st.Int(0)) : 0;
}

Status SqliteStateStore::PutDoc(const std::string& kind, const std::string& id,
                                const nlohmann::json& doc) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("INSERT OR REPLACE INTO docs (kind, id, doc) VALUES (?,?,?)");
  st.Bind(1, kind).Bind(2, id).Bind(3, doc.dump());
  if (st.Step() != SQLITE_DONE) return DbError(db_, "put " + kind);
  return Status::Ok();
}

Result<nlohmann::json> SqliteStateStore::GetDoc(const std::string& kind, const std::string& id) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM docs WHERE kind = ? AND id = ?");
  st.Bind(1, kind).Bind(2, id);
  if (st.Step() != SQLITE_ROW) return NotFound(kind, id);
  return nlohmann::json::parse(st.Text(0));
}

Result<std::vector<nlohmann::json>> SqliteStateStore::ListDocs(const std::string& kind) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM docs WHERE kind = ? ORDER BY id");
  st.Bind(1, kind);
  std::vector<nlohmann::json> out;
  while (st.Step() == SQLITE_ROW) out.push_back(nlohmann::json::parse(st.Text(0)));
  return out;
}

Status SqliteStateStore::RemoveDoc(const std::string& kind, const std::string& id) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("DELETE FROM docs WHERE kind = ? AND id = ?");
  st.Bind(1, kind).Bind(2, id);
  if (st.Step() != SQLITE_DONE) return DbError(db_, "remove " + kind);
  if (sqlite3_changes(db_) == 0) return NotFound(kind, id);
  return Status::Ok();
}

Status SqliteStateStore::InsertStep(const std::string& traj, int64_t step,
                                    const std::string& exec_id, const nlohmann::json& doc) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("INSERT INTO steps (traj, step, exec_id, doc) VALUES (?,?,?,?)");
  st.Bind(1, traj).Bind(2, step).Bind(3, exec_id).Bind(4, doc.dump());
  int rc = st.Step();
  if (rc == SQLITE_CONSTRAINT)
    return Status(Code::kConflict, "record step", traj, "step already recorded");
  if (rc != SQLITE_DONE) return DbError(db_, "record step");
  return Status::Ok();
}

Result<nlohmann::json> SqliteStateStore::GetStep(const std::string& traj, int64_t step) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM steps WHERE traj = ? AND step = ?");
  st.Bind(1, traj).Bind(2, step);
  if (st.Step() != SQLITE_ROW) return NotFound("step " + std::to_string(step), traj);
  return nlohmann::json::parse(st.Text(0));
}

Status SqliteStateStore::UpdateStep(const std::string& traj, int64_t step,
                                    const nlohmann::json& doc) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("UPDATE steps SET doc = ? WHERE traj = ? AND step = ?");
  st.Bind(1, doc.dump()).Bind(2, traj).Bind(3, step);
  if (st.Step() != SQLITE_DONE) return DbError(db_, "update step");
  if (sqlite3_changes(db_) == 0) return NotFound("step " + std::to_string(step), traj);
  return Status::Ok();
}

std::vector<nlohmann::json> SqliteStateStore::ListSteps(const std::string& traj) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT doc FROM steps WHERE traj = ? ORDER BY step");
  st.Bind(1, traj);
  std::vector<nlohmann::json> out;
  while (st.Step() == SQLITE_ROW) out.push_back(nlohmann::json::parse(st.Text(0)));
  return out;
}

int64_t SqliteStateStore::MaxStep(const std::string& traj) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT MAX(step) FROM steps WHERE traj = ?");
  st.Bind(1, traj);
  if (st.Step() != SQLITE_ROW || st.IsNull(0)) return -1;
  return st.Int(0);
}

Result<nlohmann::json> SqliteStateStore::FindStepByExec(const std::string& exec_id) {
  MutexLock lock(&mu_);
  Stmt st = stmts_->Get("SELECT traj, doc FROM steps WHERE exec_id = ? LIMIT 1");
  st.Bind(1, exec_id);
  if (st.Step() != SQLITE_ROW) return NotFound("exec", exec_id);
  return nlohmann::json{{"traj", st.Text(0)}, {"doc", nlohmann::json::parse(st.Text(1))}};
}

}  // namespace warren::server
