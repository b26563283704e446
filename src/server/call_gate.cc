#include "server/call_gate.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "base/cleanup.h"

namespace warren::server {

using nlohmann::json;

namespace {
Status NotEnabled() {
  return Status(Code::kUnavailable, "call", "fncall", "not enabled on this server");
}
}  // namespace

void CallGate::Stop() {
  if (calls_) calls_->Shutdown();
}

Result<json> CallGate::Call(const Principal& who, const std::string& body) {
  if (!calls_) return NotEnabled();
  json rq = json::parse(body, nullptr, false);
  if (rq.is_discarded()) return Invalid("call: the body is not JSON");
  return Admit(who, 1, [&] { return calls_->Call(rq); });
}

Result<json> CallGate::CallBatch(const Principal& who, const std::string& body) {
  if (!calls_) return NotEnabled();
  json rq = json::parse(body, nullptr, false);
  if (rq.is_discarded()) return Invalid("call batch: the body is not JSON");
  // A batch counts as many calls as it holds, against both quotas.
  const int64_t n = rq.is_object() && rq.contains("calls") && rq["calls"].is_array()
                        ? std::max<int64_t>(1, static_cast<int64_t>(rq["calls"].size()))
                        : 1;
  return Admit(who, n, [&] { return calls_->CallBatch(rq); });
}

Result<json> CallGate::Admit(const Principal& who, int64_t n,
                             const std::function<Result<json>()>& run) {
  if (Status st = quota_->ReserveCalls(who, n); !st.ok()) {
    MutexLock lock(&mu_);
    refused_ += n;
    return st;
  }
  Cleanup release([&] { quota_->ReleaseCalls(who.name, n); });
  {
    MutexLock lock(&mu_);
    admitted_ += n;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto r = run();
  seconds_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  CountVerdicts(r);
  return r;
}

void CallGate::CountVerdicts(const Result<json>& r) {
  auto verdict_of = [](const json& one) -> std::string {
    if (auto v = one.find("verdict"); v != one.end() && v->is_string()) return *v;
    return "error";
  };
  MutexLock lock(&mu_);
  if (!r.ok()) {
    ++verdicts_["error"];
    return;
  }
  if (auto batch = r->find("results"); batch != r->end() && batch->is_array()) {
    for (const json& one : *batch) ++verdicts_[verdict_of(one)];
    return;
  }
  ++verdicts_[verdict_of(*r)];
}

CallGate::Stats CallGate::stats() const {
  Stats s;
  MutexLock lock(&mu_);
  s.admitted = admitted_;
  s.refused = refused_;
  s.verdicts = verdicts_;
  return s;
}

std::string CallGate::RenderMetrics() const {
  std::ostringstream o;
  o << seconds_.Render("warren_call_seconds");
  if (json st = calls_ ? calls_->Stats() : json(); st.contains("runners")) {
    o << "# TYPE warren_calls_total counter\nwarren_calls_total " << st.value("calls", 0) << "\n";
    o << "# TYPE warren_call_runs_total counter\nwarren_call_runs_total " << st.value("runs", 0)
      << "\n";
    o << "# TYPE warren_fncall_runners gauge\nwarren_fncall_runners " << st["runners"].size()
      << "\n";
    o << "# TYPE warren_fncall_runner_starts_total counter\nwarren_fncall_runner_starts_total "
      << st.value("runner_starts", 0) << "\n";
  }
  o << "# TYPE warren_calls_running gauge\nwarren_calls_running " << quota_->CallsRunning() << "\n";
  MutexLock lock(&mu_);
  o << "# TYPE warren_calls_admitted_total counter\nwarren_calls_admitted_total " << admitted_
    << "\n";
  o << "# TYPE warren_calls_refused_total counter\nwarren_calls_refused_total " << refused_ << "\n";
  o << "# TYPE warren_call_verdicts_total counter\n";
  for (const auto& [verdict, n] : verdicts_)
    o << "warren_call_verdicts_total{verdict=\"" << verdict << "\"} " << n << "\n";
  return o.str();
}

}  // namespace warren::server
