#include "server/sandbox_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/state_store.h"

namespace warren::server {

SandboxTable::SandboxTable(StateStore* store) : store_(store) {
  MutexLock lock(&mu_);
  for (const auto& rec : List()) CountLocked(rec, +1);
}

std::vector<SandboxRecord> SandboxTable::List() {
  auto all = ListOrError();
  if (!all.ok()) {
    spdlog::error("list sandboxes: {}", all.status().ToString());
    return {};
  }
  return std::move(*all);
}

Result<std::vector<SandboxRecord>> SandboxTable::ListOrError() {
  std::vector<SandboxRecord> out;
  for (const auto& j : WARREN_TRY(store_->ReadSandboxes())) {
    auto rec = ParseSandboxRecord(j);
    if (!rec.ok()) {
      spdlog::error("skipping a sandbox record that does not parse: {}", rec.status().ToString());
      continue;
    }
    out.push_back(std::move(*rec));
  }
  return out;
}

Result<std::vector<SandboxTable::Shared>> SandboxTable::ListShared() {
  std::vector<StateStore::StoredText> texts = WARREN_TRY(store_->ReadSandboxTexts());
  std::vector<Shared> out;
  out.reserve(texts.size());
  std::unordered_map<std::string, Parsed> next;
  next.reserve(texts.size());
  MutexLock lock(&parsed_mu_);
  for (auto& [id, text] : texts) {
    Parsed p;
    if (auto it = parsed_.find(id); it != parsed_.end() && it->second.text == text) {
      p = std::move(it->second);
    } else {
      auto rec = ParseSandboxRecord(nlohmann::json::parse(text, nullptr, false));
      if (!rec.ok()) {
        spdlog::error("skipping a sandbox record that does not parse: {}", rec.status().ToString());
        continue;
      }
      p = {std::move(text), std::make_shared<const SandboxRecord>(std::move(*rec))};
    }
    out.push_back(p.rec);
    next.emplace(id, std::move(p));
  }
  parsed_ = std::move(next);  // records that went are forgotten
  return out;
}

Result<SandboxRecord> SandboxTable::Get(const std::string& id) {
  auto text = store_->GetSandboxText(id);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) {
      MutexLock lock(&parsed_mu_);
      parsed_.erase(id);
    }
    return text.status();
  }
  {
    MutexLock lock(&parsed_mu_);
    if (auto it = parsed_.find(id); it != parsed_.end() && it->second.text == *text)
      return *it->second.rec;
  }
  auto rec = ParseSandboxRecord(nlohmann::json::parse(*text, nullptr, false));
  // A stored record this version cannot read is the server's problem, not the caller's.
  if (!rec.ok()) return Internal("read sandbox record", id, rec.status().ToString());
  MutexLock lock(&parsed_mu_);
  parsed_[id] = Parsed{std::move(*text), std::make_shared<const SandboxRecord>(*rec)};
  return rec;
}

void SandboxTable::CountLocked(const SandboxRecord& rec, int64_t delta) {
  int64_t& n = counts_[{rec.spec.backend, rec.state}];
  n = std::max<int64_t>(0, n + delta);
}

Status SandboxTable::Insert(const SandboxRecord& rec, const ShareLimits& limits, Version* written) {
  auto stamp = store_->InsertSandbox(ToJson(rec), limits);
  if (stamp.status().code() == Code::kConflict)
    return Status(Code::kConflict, "create sandbox", rec.id, "the id exists");
  WARREN_RETURN_IF_ERROR(stamp.status());
  if (written) *written = Version{rec, *stamp};
  MutexLock lock(&mu_);
  CountLocked(rec, +1);
  return Status::Ok();
}

Result<SandboxRecord> SandboxTable::Modify(const std::string& id,
                                           const std::function<Status(SandboxRecord&)>& change,
                                           const Version* known) {
  // Another API server may change the record between our read and write: the write compares
  // the version read and, when it lost, the change is made again on the newer record.
  for (int attempt = 0;; ++attempt) {
    SandboxRecord rec;
    std::string stamp;
    if (attempt == 0 && known) {
      rec = known->rec;
      stamp = known->stamp;
    } else {
      auto stamped = WARREN_TRY(store_->GetSandboxStamped(id));
      auto parsed = ParseSandboxRecord(stamped.doc);
      // A stored record this version cannot read is the server's problem, not the caller's.
      if (!parsed.ok()) return Internal("read sandbox record", id, parsed.status().ToString());
      rec = std::move(*parsed);
      stamp = std::move(stamped.stamp);
    }
    const SandboxRecord before = rec;
    WARREN_RETURN_IF_ERROR(change(rec));
    Status st = store_->PutSandboxIf(ToJson(rec), stamp).status();
    if (st.ok()) {
      MutexLock lock(&mu_);
      CountLocked(before, -1);
      CountLocked(rec, +1);
      return rec;
    }
    if (st.code() != Code::kConflict || attempt >= 32) return st;
  }
}

Result<SandboxRecord> SandboxTable::Transition(const std::string& id, SandboxState to,
                                               std::initializer_list<SandboxState> from,
                                               const std::function<void(SandboxRecord&)>& edit,
                                               const Version* known) {
  const std::vector<SandboxState> allowed(from);
  return Modify(
      id,
      [&](SandboxRecord& rec) -> Status {
        const SandboxState was = rec.state;
        const bool expected =
            allowed.empty() || std::find(allowed.begin(), allowed.end(), was) != allowed.end();
        if (!expected || !CanMove(was, to))
          return Status(Code::kConflict, std::string("move sandbox to ") + StateName(to), id,
                        std::string("sandbox is ") + StateName(was));
        if (edit) edit(rec);  // sees the state it leaves
        rec.state = to;
        if (to != SandboxState::kLost) rec.reason.reset();  // why it was lost, once it is not
        return Status::Ok();
      },
      known);
}

Result<SandboxRecord> SandboxTable::Update(const std::string& id,
                                           const std::function<Status(SandboxRecord&)>& edit) {
  return Modify(id, [&](SandboxRecord& rec) -> Status {
    const SandboxState was = rec.state;
    WARREN_RETURN_IF_ERROR(edit(rec));
    rec.state = was;
    return Status::Ok();
  });
}

Result<SandboxRecord> SandboxTable::Remove(const std::string& id) {
  for (int attempt = 0;; ++attempt) {
    auto stamped = WARREN_TRY(store_->GetSandboxStamped(id));
    Status st = store_->RemoveSandboxIf(id, stamped.stamp);
    if (st.code() == Code::kConflict && attempt < 32) continue;  // changed: read it again
    WARREN_RETURN_IF_ERROR(st);
    {
      MutexLock lock(&parsed_mu_);
      parsed_.erase(id);
    }
    auto rec = ParseSandboxRecord(stamped.doc);
    if (!rec.ok()) return Internal("read sandbox record", id, rec.status().ToString());
    MutexLock lock(&mu_);
    CountLocked(*rec, -1);
    return rec;
  }
}

SandboxTable::Counts SandboxTable::counts() const {
  MutexLock lock(&mu_);
  return counts_;
}

}  // namespace warren::server
