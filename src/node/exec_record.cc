#include "node/exec_record.h"

#include <condition_variable>
#include <thread>

#include "base/ids.h"
#include "base/utf8.h"

namespace warren::node {

uint64_t OutputBudget::Take(uint64_t want) {
  uint64_t cur = used.load();
  for (;;) {
    uint64_t grant = cur >= limit ? 0 : std::min(want, limit - cur);
    if (grant == 0) return 0;
    if (used.compare_exchange_weak(cur, cur + grant)) return grant;
  }
}

ExecRecord::~ExecRecord() {
  if (budget_) budget_->Give(bytes_[0] + bytes_[1]);
  if (spill_) spill_->RemoveOnClose();
}

ExecRecord::ExecRecord(std::string id, std::string sandbox_id, uint64_t max_output, bool binary,
                       std::shared_ptr<OutputBudget> budget)
    : id_(std::move(id)),
      sandbox_id_(std::move(sandbox_id)),
      budget_(std::move(budget)),
      max_output_(max_output),
      binary_(binary),
      started_(NowSeconds()) {}

void ExecRecord::NotifyLocked(std::vector<std::function<void()>>* out) { out->swap(waiters_); }

void ExecRecord::AppendOutput(int stream, std::string_view data) {
  std::vector<std::function<void()>> wake;
  {
    MutexLock lock(&mu_);
    if (done_ || stream < 1 || stream > 2) return;
    const uint64_t received = data.size();
    received_[stream - 1] += received;
    uint64_t& used = bytes_[stream - 1];
    uint64_t room = max_output_ > used ? max_output_ - used : 0;
    if (budget_) room = budget_->Take(std::min<uint64_t>(room, data.size()));
    if (data.size() > room) {
      host_truncated_[stream - 1] = true;
      data = data.substr(0, static_cast<size_t>(room));
    }
    if (spill_) spill_->Append(stream, data, received);
    if (data.empty()) return;
    used += data.size();
    bytes_copy_ += data.size();
    chunks_.push_back({next_seq_++, stream, std::string(data)});
    NotifyLocked(&wake);
  }
  for (auto& f : wake) f();
}

void ExecRecord::Finish(const ExecOutcome& outcome) {
  std::vector<std::function<void()>> wake;
  std::function<void()> finisher;
  {
    MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    finished_ = NowSeconds();
    outcome_ = outcome;
    for (int i = 0; i < 2; ++i) outcome_.truncated[i] |= host_truncated_[i];
    if (spill_)
      spill_->Finish({{"exit_code", outcome_.exit_code},
                      {"signal", outcome_.signal},
                      {"timed_out", outcome_.timed_out},
                      {"truncated", {outcome_.truncated[0], outcome_.truncated[1]}},
                      {"error", outcome_.error},
                      {"duration_ms", static_cast<int64_t>((finished_ - started_) * 1000)}});
    finisher.swap(finisher_);  // also breaks the record <-> finisher reference cycle
    if (!finisher) {
      published_ = true;
      published_copy_ = true;
      NotifyLocked(&wake);
    }
  }
  if (finisher) return finisher();  // it calls Publish() once the outcome is safe
  for (auto& f : wake) f();
}

void ExecRecord::SetFinisher(std::function<void()> f) {
  MutexLock lock(&mu_);
  finisher_ = std::move(f);
}

double ExecRecord::run_seconds() const {
  MutexLock lock(&mu_);
  return done_ && finished_ > 0 ? finished_ - started_ : 0;
}

void ExecRecord::Publish() {
  std::vector<std::function<void()>> wake;
  {
    MutexLock lock(&mu_);
    if (!done_ || published_) return;
    published_ = true;
    published_copy_ = true;
    NotifyLocked(&wake);
  }
  for (auto& f : wake) f();
}

std::shared_ptr<ExecRecord> ExecRecord::Replayed(const nlohmann::json& result,
                                                 const std::string& sandbox_id,
                                                 const std::string& out, const std::string& err) {
  auto rec = Pending(result.value("exec_id", ""), sandbox_id, result.contains("stdout_b64"));
  rec->Complete(result, out, err, /*replayed=*/true);
  return rec;
}

std::shared_ptr<ExecRecord> ExecRecord::Pending(const std::string& exec_id,
                                                const std::string& sandbox_id, bool binary) {
  return std::make_shared<ExecRecord>(exec_id, sandbox_id, UINT64_MAX, binary);
}

void ExecRecord::Complete(const nlohmann::json& result, const std::string& out,
                          const std::string& err, bool replayed, nlohmann::json extra) {
  {
    // Set before the end is announced: whoever is woken reads them.
    MutexLock lock(&mu_);
    replayed_ = replayed;
    fixed_duration_ms_ = result.value("duration_ms", int64_t{0});
    extra_ = std::move(extra);
  }
  AppendOutput(1, out);
  AppendOutput(2, err);
  Finish(OutcomeOf(result));
}

ExecOutcome ExecRecord::OutcomeOf(const nlohmann::json& result) {
  ExecOutcome o;
  o.exit_code = result.value("exit_code", nlohmann::json(-1)).is_number()
                    ? result["exit_code"].get<int>()
                    : -1;
  o.signal = result.value("signal", nlohmann::json(nullptr)).is_string()
                 ? result["signal"].get<std::string>()
                 : "";
  o.timed_out = result.value("timed_out", false);
  o.truncated[0] = result.value("stdout_truncated", false);
  o.truncated[1] = result.value("stderr_truncated", false);
  o.error = result.value("error", "");
  return o;
}

void ExecRecord::AppendChunk(uint64_t seq, int stream, std::string_view data) {
  std::vector<std::function<void()>> wake;
  {
    MutexLock lock(&mu_);
    if (done_ || stream < 1 || stream > 2 || seq < next_seq_) return;
    received_[stream - 1] += data.size();
    bytes_[stream - 1] += data.size();
    bytes_copy_ += data.size();
    chunks_.push_back({seq, stream, std::string(data)});
    next_seq_ = seq + 1;
    NotifyLocked(&wake);
  }
  for (auto& f : wake) f();
}

void ExecRecord::FinishWith(const nlohmann::json& result, uint64_t result_seq) {
  {
    MutexLock lock(&mu_);
    if (done_) return;
    fixed_duration_ms_ = result.value("duration_ms", int64_t{0});
    next_seq_ = std::max(next_seq_, result_seq);
  }
  Finish(OutcomeOf(result));
}

void ExecRecord::AttachSpill(std::unique_ptr<ExecSpill> spill) {
  MutexLock lock(&mu_);
  spill_ = std::move(spill);
}

std::pair<uint64_t, uint64_t> ExecRecord::received() const {
  MutexLock lock(&mu_);
  return {received_[0], received_[1]};
}

std::shared_ptr<ExecRecord> ExecRecord::Restore(ExecSpill::Loaded l, const std::string& sandbox_id,
                                                std::shared_ptr<OutputBudget> budget) {
  const nlohmann::json& m = l.meta;
  auto rec = std::make_shared<ExecRecord>(m.value("id", ""), sandbox_id,
                                          m.value("max_output", uint64_t{1} << 20),
                                          m.value("binary", false), std::move(budget));
  rec->SetInput(m.value("stdin_open", false), m.value("tty", false));
  if (auto it = m.find("argv"); it != m.end() && it->is_array()) {
    std::vector<std::string> argv;
    for (const auto& a : *it)
      if (a.is_string()) argv.push_back(a.get<std::string>());
    rec->SetCommand(std::move(argv));
  }
  {
    MutexLock lock(&rec->mu_);
    // Started when the meta says, on our monotonic clock.
    rec->started_ = NowSeconds() - (UnixNow() - m.value("started_unix", UnixNow()));
  }
  for (auto& f : l.frames) {
    MutexLock lock(&rec->mu_);
    int i = f.stream == 2 ? 1 : 0;
    rec->received_[i] += f.received;
    if (f.kept.size() < f.received) rec->host_truncated_[i] = true;
    if (f.kept.empty()) continue;
    uint64_t grant = rec->budget_ ? rec->budget_->Take(f.kept.size()) : f.kept.size();
    if (grant < f.kept.size()) {
      rec->host_truncated_[i] = true;
      f.kept.resize(static_cast<size_t>(grant));
    }
    rec->bytes_[i] += f.kept.size();
    rec->bytes_copy_ += f.kept.size();
    rec->chunks_.push_back({rec->next_seq_++, i + 1, std::move(f.kept)});
  }
  rec->AttachSpill(std::move(l.spill));
  if (m.contains("outcome") && m["outcome"].is_object()) {
    const auto& o = m["outcome"];
    ExecOutcome out;
    out.exit_code = o.value("exit_code", -1);
    out.signal = o.value("signal", "");
    out.timed_out = o.value("timed_out", false);
    if (o.contains("truncated") && o["truncated"].is_array() && o["truncated"].size() == 2) {
      out.truncated[0] = o["truncated"][0].get<bool>();
      out.truncated[1] = o["truncated"][1].get<bool>();
    }
    out.error = o.value("error", "");
    rec->Finish(out);
    MutexLock lock(&rec->mu_);
    rec->fixed_duration_ms_ = o.value("duration_ms", int64_t{-1});
  }
  return rec;
}

ExecSpill::Loaded ExecRecord::CopyForFork() const {
  MutexLock lock(&mu_);
  ExecSpill::Loaded out;
  out.meta = {{"id", id_},         {"max_output", max_output_},
              {"binary", binary_}, {"stdin_open", stdin_open_},
              {"tty", tty_},       {"started_unix", UnixNow() - (NowSeconds() - started_)},
              {"argv", argv_}};
  for (int i = 0; i < 2; ++i) {
    ExecSpill::Loaded::Frame f{i + 1, "", received_[i]};
    for (const auto& c : chunks_)
      if (c.stream == i + 1) f.kept += c.data;
    out.frames.push_back(std::move(f));
  }
  return out;
}

std::string ExecRecord::RawOutput(int stream) const {
  MutexLock lock(&mu_);
  std::string out;
  for (const auto& c : chunks_)
    if (c.stream == stream) out += c.data;
  return out;
}

bool ExecRecord::done() const { return published_copy_; }

uint64_t ExecRecord::bytes() const { return bytes_copy_; }

uint64_t ExecRecord::last_seq() const {
  MutexLock lock(&mu_);
  return next_seq_ - 1;
}

ExecRecord::Snapshot ExecRecord::Poll(uint64_t after, std::function<void()> notify) {
  MutexLock lock(&mu_);
  Snapshot s;
  s.done = published_;
  // Chunks are in seq order: find the first one after `after`.
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), after,
                             [](uint64_t a, const OutputChunk& c) { return a < c.seq; });
  s.chunks.assign(it, chunks_.end());
  if (s.chunks.empty() && !published_ && notify) waiters_.push_back(std::move(notify));
  return s;
}

bool ExecRecord::WaitDone(int timeout_ms) {
  auto state = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
  auto flag = std::make_shared<bool>(false);
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (published_) return true;
      waiters_.push_back([state, flag] {
        std::lock_guard l(state->first);
        *flag = true;
        state->second.notify_all();
      });
    }
    std::unique_lock l(state->first);
    if (!state->second.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return *flag; }))
      return done();
    *flag = false;
  }
}

bool ExecRecord::awaited() const {
  MutexLock lock(&mu_);
  return !published_ && !waiters_.empty();
}

nlohmann::json ExecRecord::ResultJson() const {
  MutexLock lock(&mu_);
  return ResultJsonLocked(published_);
}

nlohmann::json ExecRecord::FinalResultJson() const {
  MutexLock lock(&mu_);
  return ResultJsonLocked(done_);
}

ExecSummary ExecRecord::Summary() const {
  MutexLock lock(&mu_);
  ExecSummary s;
  s.exec_id = id_;
  s.argv = argv_;
  s.started_unix = UnixNow() - (NowSeconds() - started_);
  s.running = !published_;
  s.duration_ms =
      fixed_duration_ms_ >= 0
          ? fixed_duration_ms_
          : static_cast<int64_t>(((done_ ? finished_ : NowSeconds()) - started_) * 1000);
  s.output_bytes = bytes_[0] + bytes_[1];
  if (published_) {
    if (outcome_.exit_code >= 0) s.exit_code = outcome_.exit_code;
    s.signal = outcome_.signal;
    s.timed_out = outcome_.timed_out;
  }
  return s;
}

ExecOutcome ExecRecord::outcome() const {
  MutexLock lock(&mu_);
  return outcome_;
}

nlohmann::json ExecRecord::ResultJsonLocked(bool ended) const {
  std::string out[2];
  for (const auto& c : chunks_) out[c.stream - 1] += c.data;
  nlohmann::json j = {
      {"exec_id", id_},
      {"state", ended ? "exited" : "running"},
      {"exit_code", nullptr},
      {"signal", nullptr},
      {"timed_out", false},
      {"stdout", SanitizeUtf8(out[0])},
      {"stderr", SanitizeUtf8(out[1])},
      {"stdout_truncated", ended ? outcome_.truncated[0] : host_truncated_[0]},
      {"stderr_truncated", ended ? outcome_.truncated[1] : host_truncated_[1]},
      {"duration_ms",
       fixed_duration_ms_ >= 0
           ? fixed_duration_ms_
           : static_cast<int64_t>(((ended ? finished_ : NowSeconds()) - started_) * 1000)},
      {"replayed", replayed_},
  };
  if (binary_) {
    j["stdout_b64"] = Base64Encode(out[0]);
    j["stderr_b64"] = Base64Encode(out[1]);
  }
  if (ended) {
    if (outcome_.exit_code >= 0) j["exit_code"] = outcome_.exit_code;
    if (!outcome_.signal.empty()) j["signal"] = outcome_.signal;
    j["timed_out"] = outcome_.timed_out;
    if (!outcome_.error.empty()) j["error"] = outcome_.error;
    if (extra_.is_object())
      for (const auto& [k, v] : extra_.items()) j[k] = v;
  }
  return j;
}

nlohmann::json ChunkJson(const OutputChunk& c, bool binary) {
  nlohmann::json j = {{"seq", c.seq},
                      {"stream", c.stream == 1 ? "stdout" : "stderr"},
                      {"data", SanitizeUtf8(c.data)}};
  if (binary) j["data_b64"] = Base64Encode(c.data);
  return j;
}

void ExecBook::Settle() {
  for (auto it = live_.begin(); it != live_.end();) {
    if ((*it)->done()) {  // its bytes are final once it is done (Append stops at Finish)
      finished_bytes_ += (*it)->bytes();
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<ExecSummary> ExecBook::Summaries() const {
  std::vector<ExecSummary> out;
  out.reserve(order_.size());
  for (const auto& r : order_) out.push_back(r->Summary());
  return out;
}

size_t ExecBook::Running() const {
  size_t n = 0;
  for (const ExecRecord* r : live_) n += !r->done();
  return n;
}

Status ExecBook::Admit(const std::shared_ptr<ExecRecord>& rec, size_t max_running,
                       size_t keep_count, uint64_t keep_bytes) {
  Settle();
  if (live_.size() >= max_running)
    return Status(Code::kQuota, "exec", rec->sandbox_id(),
                  std::to_string(max_running) + " commands are already running");
  by_id_[rec->id()] = rec;
  order_.push_back(rec);
  live_.insert(rec.get());
  uint64_t held = finished_bytes_;
  for (const ExecRecord* r : live_) held += r->bytes();
  // Only records counted as finished go; a running one (or one finished since Settle) stays.
  for (size_t i = 0; i < order_.size() && (order_.size() > keep_count || held > keep_bytes);) {
    const std::shared_ptr<ExecRecord>& r = order_[i];
    if (live_.count(r.get())) {
      ++i;
      continue;
    }
    held -= r->bytes();
    finished_bytes_ -= r->bytes();
    by_id_.erase(r->id());
    order_.erase(order_.begin() + static_cast<long>(i));
  }
  return Status::Ok();
}

void ExecBook::Adopt(std::shared_ptr<ExecRecord> rec) {
  if (by_id_.count(rec->id())) return;
  live_.insert(rec.get());  // counted as finished, if it is, at the next Settle
  order_.push_back(rec);
  by_id_[rec->id()] = std::move(rec);
}

std::shared_ptr<ExecRecord> ExecBook::Find(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

}  // namespace warren::node
