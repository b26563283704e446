#include "node/fncall/call_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "base/ids.h"
#include "base/utf8.h"
#include "node/fncall/judge.h"
#include "node/fncall/languages.h"

namespace warren::fncall {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxCode = 1 << 20;
constexpr size_t kMaxCases = 1000;
// How many of a judged call's cases run at once in its runner. One: each case's wall time and
// memory are its own, as on an idle runner, and more calls than CPUs keep a node busy anyway.
constexpr int kCaseParallelism = 1;
constexpr uint64_t kMaxMemoryMb = 1024;
constexpr double kMaxTimeoutS = 300;
// Compiling: its own limits, the same for every call (a compile bomb ends as compile_error).
constexpr int64_t kCompileWallMs = 30000;
constexpr uint64_t kCompileMemory = 1ull << 30;
constexpr uint64_t kCompileOutput = 64 << 10;

Status Bad(const std::string& what) { return Invalid("call: " + what); }

std::string StrField(const json& j, const char* key, const std::string& def, Status* err) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_string()) *err = Bad(std::string("`") + key + "` must be a string");
  return j[key].is_string() ? j[key].get<std::string>() : def;
}

json CaseJson(const RunResult& r, const std::string& verdict) {
  json sig = r.signal ? json(SignalName(r.signal)) : json(nullptr);
  return {{"verdict", verdict},
          {"exit_code", r.exit_code},
          {"signal", sig},
          {"stdout", r.stdout_data},
          {"stderr", r.stderr_data},
          {"timed_out", r.timed_out},
          {"duration_ms", r.wall_ms},
          {"cpu_ms", r.cpu_ms},
          {"memory_peak_kb", r.maxrss_kb},
          {"stdout_truncated", r.stdout_truncated},
          {"stderr_truncated", r.stderr_truncated}};
}

}  // namespace

CallService::CallService(node::NodeApi* node, ImageResolver resolve, PoolOptions opts)
    : node_(node), resolve_(std::move(resolve)), opts_(std::move(opts)) {
  maintainer_ = std::thread([this] { Maintain(); });
}

CallService::~CallService() { Shutdown(); }

void CallService::Shutdown() {
  std::vector<std::shared_ptr<Runner>> all;
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    for (auto& [img, pool] : pools_)
      for (auto& r : pool.runners) all.push_back(r);
    pools_.clear();
    for (auto& r : retiring_) all.push_back(r);
    retiring_.clear();
    cv_.notify_all();
  }
  if (maintainer_.joinable()) maintainer_.join();
  for (auto& r : all) r->Stop();
}

static std::string PoolKey(const std::vector<std::string>& layers) {
  std::string k;
  for (const auto& l : layers) k += l + ",";
  return k;
}

Result<std::shared_ptr<Runner>> CallService::StartRunner(const std::vector<std::string>& layers,
                                                         const std::string& image) {
  RunnerConfig cfg;
  cfg.id = "fnr-" + RandomHex(6);
  cfg.layer_digests = layers;
  cfg.memory_bytes = opts_.runner_memory_bytes;
  cfg.max_workers = opts_.workers_per_runner;
  cfg.prefork = opts_.prefork;
  cfg.call_seccomp_bpf = opts_.call_seccomp_bpf;
  cfg.zygote_lib = opts_.zygote_lib;
  runner_starts_++;
  auto r = Runner::Start(node_, cfg);
  if (!r.ok()) {
    runner_failures_++;
    return r.status().Context("runner image " + image);
  }
  spdlog::info("fncall: runner {} started for {}", cfg.id, image);
  return r;
}

Result<std::shared_ptr<Runner>> CallService::Acquire(const std::vector<std::string>& layers,
                                                     const std::string& image) {
  const std::string key = PoolKey(layers);
  MutexLock lock(&mu_);
  auto deadline = Clock::now() + std::chrono::seconds(90);
  while (true) {
    if (stop_) return Status(Code::kUnavailable, "call", image, "shutting down");
    Pool& pool = pools_[key];
    if (pool.label.empty()) pool.label = image, pool.layers = layers;
    std::shared_ptr<Runner> best;
    for (auto& r : pool.runners)
      if (r->healthy() && (!best || r->inflight() < best->inflight())) best = r;
    const bool all_busy = !best || best->inflight() >= opts_.workers_per_runner;
    if (all_busy && static_cast<int>(pool.runners.size()) + pool.starting < opts_.max_runners &&
        (!best || pool.starting == 0)) {
      ++pool.starting;
      lock.Unlock();
      auto r = StartRunner(layers, image);
      lock.Lock();
      Pool& p = pools_[key];
      --p.starting;
      cv_.notify_all();
      if (r.ok()) {
        if (stop_) {
          lock.Unlock();
          (*r)->Stop();
          return Status(Code::kUnavailable, "call", image, "shutting down");
        }
        p.runners.push_back(*r);
        p.last_used[r->get()] = Clock::now();
        return *r;
      }
      if (!best) return r.status();
      spdlog::warn("fncall: {}", r.status().ToString());
      continue;
    }
    if (best) {
      pool.last_used[best.get()] = Clock::now();
      return best;
    }
    if (pool.starting == 0) continue;  // nothing healthy, nothing coming: start one
    if (lock.WaitUntil(cv_, deadline) == std::cv_status::timeout)
      return Status(Code::kUnavailable, "call", image, "no runner became ready in 90 s");
  }
}

void CallService::Retire(const std::shared_ptr<Runner>& r) {
  MutexLock lock(&mu_);
  for (auto& [img, pool] : pools_) {
    auto it = std::find(pool.runners.begin(), pool.runners.end(), r);
    if (it == pool.runners.end()) continue;
    pool.runners.erase(it);
    pool.last_used.erase(r.get());
    retiring_.push_back(r);
  }
}

Result<RunResult> CallService::RunLayers(const std::vector<std::string>& layers,
                                         const RunRequest& req) {
  return RunOn(layers, layers.empty() ? "" : layers.front(), req);
}

Result<RunResult> CallService::RunOn(const std::vector<std::string>& layers,
                                     const std::string& image, const RunRequest& req) {
  return std::move(RunCasesOn(layers, image, req, {req.stdin_data}).front());
}

std::vector<Result<RunResult>> CallService::RunCasesOn(const std::vector<std::string>& layers,
                                                       const std::string& image,
                                                       const RunRequest& req,
                                                       const std::vector<std::string>& stdins) {
  const Status fits = CheckExecRun(req);
  if (!fits.ok())  // no runner's fault: not tried on two
    return std::vector<Result<RunResult>>(stdins.size(), fits);
  std::vector<Result<RunResult>> results(stdins.size());  // each set below
  std::vector<size_t> todo(stdins.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  for (int attempt = 0; attempt < 2 && !todo.empty(); ++attempt) {
    auto runner = Acquire(layers, image);
    if (!runner.ok()) {
      for (size_t i : todo) results[i] = runner.status();
      break;
    }
    std::vector<std::string> again;  // a retry's stdins: the cases the first runner left
    if (attempt > 0)
      for (size_t i : todo) again.push_back(stdins[i]);
    auto got = (*runner)->RunCases(req, attempt > 0 ? again : stdins, kCaseParallelism);
    runs_ += got.size();
    if (!(*runner)->healthy() || (*runner)->served() >= opts_.recycle_after) Retire(*runner);
    std::vector<size_t> failed;
    for (size_t k = 0; k < todo.size(); ++k) {
      if (!got[k].ok()) {
        if (failed.empty())
          spdlog::warn("fncall: run failed on {}: {}", (*runner)->id(), got[k].status().ToString());
        failed.push_back(todo[k]);
      }
      results[todo[k]] = std::move(got[k]);
    }
    todo = std::move(failed);
  }
  return results;
}

Result<json> CallService::Call(const json& rq) {
  if (!rq.is_object()) return Bad("the body must be a JSON object");
  static const std::set<std::string> kFields = {
      "language",  "code",  "stdin",   "args",  "timeout_s",
      "memory_mb", "cases", "compare", "image", "max_output_bytes",
      "env",       "binary"};
  for (const auto& [k, v] : rq.items())
    if (!kFields.count(k)) return Bad("unknown field `" + k + "`");
  Status err;
  const std::string lang_name = StrField(rq, "language", "", &err);
  const std::string code = StrField(rq, "code", "", &err);
  const std::string stdin_data = StrField(rq, "stdin", "", &err);
  const std::string compare_s = StrField(rq, "compare", "exact", &err);
  std::string image = StrField(rq, "image", opts_.default_image, &err);
  WARREN_RETURN_IF_ERROR(err);
  auto lang = FindLanguage(lang_name);
  if (!lang) {
    std::string names;
    for (const auto& n : LanguageNames()) names += (names.empty() ? "" : ", ") + n;
    return Bad("unknown language `" + lang_name + "` (known: " + names + ")");
  }
  if (!rq.contains("code") || !rq["code"].is_string()) return Bad("`code` is required");
  if (code.size() > kMaxCode) return Bad("`code` is larger than 1 MiB");
  if (image.empty())
    return Bad(
        "no runner image: pass `image`, or start warren serve or warren node with --fncall-image "
        "NAME:TAG");
  if (compare_s != "exact" && compare_s != "whitespace")
    return Bad("`compare` must be exact or whitespace");
  const Compare compare = compare_s == "exact" ? Compare::kExact : Compare::kWhitespace;
  double timeout_s = 10;
  if (rq.contains("timeout_s") && !rq["timeout_s"].is_null()) {
    if (!rq["timeout_s"].is_number()) return Bad("`timeout_s` must be a number");
    timeout_s = rq["timeout_s"].get<double>();
  }
  if (!(timeout_s > 0 && timeout_s <= kMaxTimeoutS)) return Bad("`timeout_s` must be in (0, 300]");
  uint64_t memory_mb = 256;
  if (rq.contains("memory_mb") && !rq["memory_mb"].is_null()) {
    if (!rq["memory_mb"].is_number_integer() || rq["memory_mb"].get<int64_t>() < 16 ||
        rq["memory_mb"].get<int64_t>() > static_cast<int64_t>(kMaxMemoryMb))
      return Bad("`memory_mb` must be an integer from 16 to 1024");
    memory_mb = rq["memory_mb"].get<uint64_t>();
  }
  uint64_t max_output = 1 << 20;
  // `binary`: the raw output bytes too, as `stdout_b64`/`stderr_b64` (the strings replace
  // invalid UTF-8).
  if (rq.contains("binary") && !rq["binary"].is_null() && !rq["binary"].is_boolean())
    return Bad("`binary` must be a boolean");
  const bool binary =
      rq.contains("binary") && rq["binary"].is_boolean() && rq["binary"].get<bool>();
  if (rq.contains("max_output_bytes") && !rq["max_output_bytes"].is_null()) {
    if (!rq["max_output_bytes"].is_number_unsigned() ||
        rq["max_output_bytes"].get<uint64_t>() > (64u << 20))
      return Bad("`max_output_bytes` must be an integer up to 64 MiB");
    max_output = rq["max_output_bytes"].get<uint64_t>();
  }
  std::vector<std::string> args;
  if (rq.contains("args") && !rq["args"].is_null()) {
    if (!rq["args"].is_array()) return Bad("`args` must be a list of strings");
    for (const auto& a : rq["args"]) {
      if (!a.is_string()) return Bad("`args` must be a list of strings");
      args.push_back(a.get<std::string>());
    }
  }
  std::map<std::string, std::string> env = DefaultCallEnv();
  if (rq.contains("env") && !rq["env"].is_null()) {
    if (!rq["env"].is_object()) return Bad("`env` must be an object of strings");
    for (const auto& [k, v] : rq["env"].items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        return Bad("`env` must map names to strings");
      env[k] = v.get<std::string>();
    }
  }
  struct Case {
    std::string stdin_data;
    std::string expected;
  };
  std::vector<Case> cases;
  const bool judged = rq.contains("cases") && !rq["cases"].is_null();
  if (judged) {
    if (!rq["cases"].is_array() || rq["cases"].empty() || rq["cases"].size() > kMaxCases)
      return Bad("`cases` must be a list of 1 to 1000 {stdin, expected}");
    for (const auto& c : rq["cases"]) {
      if (!c.is_object()) return Bad("each case must be an object {stdin, expected}");
      for (const auto& [k, v] : c.items())
        if (k != "stdin" && k != "expected") return Bad("unknown field `" + k + "` in a case");
      Status e;
      Case k{StrField(c, "stdin", "", &e), StrField(c, "expected", "", &e)};
      WARREN_RETURN_IF_ERROR(e);
      cases.push_back(std::move(k));
    }
  }
  const std::vector<std::string> layers = WARREN_TRY(resolve_(image));
  calls_++;

  json result = {{"compile", nullptr}, {"cases", nullptr}};
  // 1. Compile once.
  std::vector<RunFile> run_files;
  if (!lang->compile.empty()) {
    RunRequest c;
    c.argv = lang->compile;
    c.env = env;
    c.files = {{lang->source, code, 0644}};
    c.limits.wall_ms = kCompileWallMs;
    c.limits.cpu_s = kCompileWallMs / 1000;
    c.limits.as_bytes = lang->address_space_limit ? kCompileMemory : 0;
    c.limits.nproc = std::max<uint64_t>(64, lang->min_nproc);
    c.limits.max_output = kCompileOutput;
    c.collect = lang->artifacts;
    RunResult cr = WARREN_TRY(RunOn(layers, image, c));
    bool ok = cr.exit_code == 0 && cr.signal == 0 && !cr.timed_out && !cr.files.empty();
    std::string msg = cr.stderr_data + cr.stdout_data;
    if (cr.timed_out)
      msg += "\nwarren: compilation ran out of time (30 s)";
    else if (cr.output_limit)
      msg += "\nwarren: compiler output cut at 64 KiB";
    else if (cr.signal)
      msg += "\nwarren: the compiler was killed by " + SignalName(cr.signal);
    else if (cr.exit_code == 0 && cr.files.empty())
      msg += "\nwarren: the compiler left no program";
    result["compile"] = {{"ok", ok}, {"stderr", msg}, {"duration_ms", cr.wall_ms}};
    if (!ok) {
      result.update({{"verdict", "compile_error"},
                     {"exit_code", cr.exit_code},
                     {"signal", nullptr},
                     {"stdout", ""},
                     {"stderr", msg},
                     {"timed_out", false},
                     {"duration_ms", 0},
                     {"cpu_ms", 0},
                     {"memory_peak_kb", 0}});
      return result;  // cases stay null: none ran
    }
    run_files = std::move(cr.files);
  } else {
    run_files = {{lang->source, code, 0755}};
  }

  // 2. Run: once, or once per case, each in a fresh worker.
  RunRequest run;
  run.python = lang->in_process_python;
  run.code = code;
  run.filename = lang->source;
  run.args = args;
  for (std::string a : lang->run) {
    if (auto p = a.find("{memory_mb}"); p != std::string::npos)
      a.replace(p, 11, std::to_string(memory_mb));
    run.argv.push_back(a);
  }
  for (const auto& a : args) run.argv.push_back(a);
  run.env = env;
  run.files = run_files;
  run.limits.wall_ms = static_cast<int64_t>(std::ceil(timeout_s * 1000));
  run.limits.cpu_s = static_cast<int64_t>(std::ceil(timeout_s));
  run.limits.as_bytes = lang->address_space_limit ? memory_mb << 20 : 0;
  run.limits.stack_bytes = std::min<uint64_t>(memory_mb << 20, 256ull << 20);
  run.limits.nproc = std::max<uint64_t>(64, lang->min_nproc);
  run.limits.max_output = max_output;
  const int64_t cpu_limit_ms = static_cast<int64_t>(timeout_s * 1000);
  const uint64_t mem_bytes = memory_mb << 20;

  auto judge = [&](const RunResult& r) {
    return RunVerdict(r, cpu_limit_ms, mem_bytes, lang->address_space_limit);
  };
  auto top = [&](const RunResult& r, const std::string& verdict) {
    result.update({{"verdict", verdict},
                   {"exit_code", r.exit_code},
                   {"signal", r.signal ? json(SignalName(r.signal)) : json(nullptr)},
                   {"stdout", r.stdout_data},
                   {"stderr", r.stderr_data},
                   {"stdout_truncated", r.stdout_truncated},
                   {"stderr_truncated", r.stderr_truncated},
                   {"timed_out", r.timed_out},
                   {"duration_ms", r.wall_ms},
                   {"cpu_ms", r.cpu_ms},
                   {"memory_peak_kb", r.maxrss_kb}});
    if (binary)
      result.update({{"stdout_b64", Base64Encode(r.stdout_data)},
                     {"stderr_b64", Base64Encode(r.stderr_data)}});
  };
  if (!judged) {
    run.stdin_data = stdin_data;
    RunResult r = WARREN_TRY(RunOn(layers, image, run));
    top(r, judge(r));
    return result;
  }
  json cs = json::array();
  std::optional<RunResult> first_bad;
  std::string first_bad_verdict;
  RunResult first;
  std::vector<std::string> stdins;
  stdins.reserve(cases.size());
  for (const Case& c : cases) stdins.push_back(c.stdin_data);
  std::vector<Result<RunResult>> runs = RunCasesOn(layers, image, run, stdins);
  for (size_t i = 0; i < cases.size(); ++i) {
    RunResult r = WARREN_TRY(std::move(runs[i]));
    std::string v = judge(r);
    if (v != "ok" && !first_bad) first_bad = r, first_bad_verdict = v;
    if (v == "ok")
      v = OutputMatches(r.stdout_data, cases[i].expected, compare) ? "passed" : "wrong_answer";
    cs.push_back(CaseJson(r, v));
    if (binary)
      cs.back().update({{"stdout_b64", Base64Encode(r.stdout_data)},
                        {"stderr_b64", Base64Encode(r.stderr_data)}});
    if (i == 0) first = std::move(r);
  }
  // The call's own verdict says whether the program ran cleanly on every case (the cases
  // say whether it was right): the first case that did not, or else the first case.
  if (first_bad)
    top(*first_bad, first_bad_verdict);
  else
    top(first, "ok");
  result["cases"] = cs;
  return result;
}

Result<json> CallService::CallBatch(const json& rq) {
  if (!rq.is_object() || !rq.contains("calls") || !rq["calls"].is_array())
    return Bad("the body must be {\"calls\": [CallRequest, ...]}");
  for (const auto& [k, v] : rq.items())
    if (k != "calls") return Bad("unknown field `" + k + "`");
  const json& calls = rq["calls"];
  if (calls.size() > kMaxBatchCalls)
    return Bad("at most " + std::to_string(kMaxBatchCalls) + " calls per batch");
  std::vector<json> out(calls.size());
  std::atomic<size_t> next{0};
  // As many at once as the pool can run; each call blocks only its own thread.
  size_t threads = std::min<size_t>(
      calls.size(), static_cast<size_t>(opts_.max_runners * opts_.workers_per_runner));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < calls.size();) {
        auto r = Call(calls[i]);
        out[i] = r.ok() ? *r
                        : json{{"error",
                                {{"code", CodeName(r.status().code())},
                                 {"message", r.status().ToString()}}}};
      }
    });
  for (auto& t : pool) t.join();
  return json{{"results", out}};
}

json CallService::Stats() const {
  MutexLock lock(&mu_);
  json runners = json::array();
  for (const auto& [key, pool] : pools_)
    for (const auto& r : pool.runners)
      runners.push_back({{"id", r->id()},
                         {"image", pool.label},
                         {"inflight", r->inflight()},
                         {"served", r->served()},
                         {"healthy", r->healthy()},
                         {"zygote", r->zygote()},
                         {"copied_at_clone", r->copied_at_clone()},
                         {"native_pid1", r->native_pid1()}});
  return {{"runners", runners},
          {"calls", calls_.load()},
          {"runs", runs_.load()},
          {"runner_starts", runner_starts_.load()},
          {"runner_failures", runner_failures_.load()},
          {"languages", LanguageNames()},
          {"default_image", opts_.default_image}};
}

void CallService::Maintain() {
  MutexLock lock(&mu_);
  bool warmed = opts_.default_image.empty();
  while (!stop_) {
    lock.WaitFor(cv_, std::chrono::seconds(1));
    if (stop_) break;
    // Runners that went bad leave the pool now; retired ones stop once they are idle.
    for (auto& [img, pool] : pools_) {
      for (auto it = pool.runners.begin(); it != pool.runners.end();) {
        const bool idle_extra =
            pool.runners.size() > 1 && (*it)->inflight() == 0 &&
            Clock::now() - pool.last_used[it->get()] > std::chrono::seconds(opts_.idle_stop_s);
        if (!(*it)->healthy() || idle_extra) {
          pool.last_used.erase(it->get());
          retiring_.push_back(*it);
          it = pool.runners.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::vector<std::shared_ptr<Runner>> done;
    for (auto it = retiring_.begin(); it != retiring_.end();) {
      if ((*it)->inflight() == 0)
        done.push_back(*it), it = retiring_.erase(it);
      else
        ++it;
    }
    if (!done.empty() || !warmed) {
      lock.Unlock();
      for (auto& r : done) r->Stop();
      if (!warmed) {
        // A first runner for the default image, so the first call does not wait for it.
        warmed = true;
        auto layers = resolve_(opts_.default_image);
        auto r = layers.ok() ? Acquire(*layers, opts_.default_image) : layers.status();
        if (!r.ok())
          spdlog::info("fncall: no runner yet for {}: {}", opts_.default_image,
                       r.status().ToString());
      }
      lock.Lock();
    }
  }
}

}  // namespace warren::fncall
