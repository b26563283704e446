#include "node/fncall/runner.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/native_request.h"
#include "agent/protocol.h"
#include "base/ids.h"

namespace warren::fncall {

extern const char kZygoteScript[];  // generated from zygote.py

namespace {

using nlohmann::json;

constexpr int kReadyTimeoutMs = 60000;
// How long past a run's own wall limit we wait before calling the runner hung.
constexpr int64_t kRunSlackMs = 15000;

json LimitsJson(const RunLimits& l) {
  return {{"wall_ms", l.wall_ms},
          {"cpu_s", l.cpu_s},
          {"as_bytes", l.as_bytes},
          {"stack_bytes", l.stack_bytes},
          {"fsize_bytes", l.fsize_bytes},
          {"nproc", l.nproc},
          {"nofile", l.nofile},
          {"max_output", l.max_output},
          {"kill_at_output_cap", l.kill_at_output_cap}};
}

}  // namespace

const std::map<std::string, std::string>& DefaultCallEnv() {
  static const std::map<std::string, std::string> env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
                                                         {"HOME", "/tmp"},
                                                         {"TMPDIR", "/tmp"},
                                                         {"LANG", "C.UTF-8"},
                                                         {"PYTHONDONTWRITEBYTECODE", "1"}};
  return env;
}

Result<std::shared_ptr<Runner>> Runner::Start(node::NodeApi* node, const RunnerConfig& cfg) {
  std::shared_ptr<Runner> r(new Runner(node, cfg));
  node::NodeSandboxSpec spec;
  spec.config.id = cfg.id;
  spec.config.hostname = "runner";
  for (const auto& d : cfg.layer_digests) spec.config.layers.push_back({d, ""});
  spec.config.memory_bytes = cfg.memory_bytes;
  spec.config.disk_bytes = cfg.disk_bytes;
  spec.config.pids = cfg.pids;
  spec.config.cpus = cfg.cpus;
  spec.config.fncall_runner = true;
  WARREN_RETURN_IF_ERROR(node->CreateSandbox(spec).status().Context("start fncall runner"));

  std::weak_ptr<Runner> weak = r;
  node::ExecSpec es;
  // The dispatcher is the agent's own binary (see agent/call_dispatcher.h). Its first frame:
  // the configuration, then zygote.py, the calls' seccomp filter and warren-zygote.so.
  es.argv = {"/proc/self/exe", "--call-dispatcher"};
  es.env = DefaultCallEnv();
  es.channel = true;
  es.has_stdin = true;
  const std::string script = kZygoteScript;
  json init = {{"uid_base", 10000},
               {"max_workers", cfg.max_workers},
               {"prefork", cfg.prefork},
               {"tmp_bytes", cfg.tmp_bytes},
               {"python", cfg.python},
               {"script_len", script.size()},
               {"bpf_len", cfg.call_seccomp_bpf.size()},
               {"lib_len", cfg.zygote_lib ? cfg.zygote_lib->size() : 0}};
  es.stdin_data = agent::EncodeFrame(
      init, script + cfg.call_seccomp_bpf + (cfg.zygote_lib ? *cfg.zygote_lib : ""));
  es.on_output = [weak](int stream, std::string_view data) {
    if (auto self = weak.lock()) self->OnOutput(stream, data);
  };
  es.on_record = [weak](const std::shared_ptr<node::ExecRecord>& rec) {
    std::weak_ptr<node::ExecRecord> wrec = rec;
    rec->SetFinisher([weak, wrec] {
      std::string why = "the runner's dispatcher ended";
      if (auto rec = wrec.lock()) {
        json res = rec->FinalResultJson();
        why += " (exit " + res.value("exit_code", json(nullptr)).dump() + ", signal " +
               res.value("signal", json(nullptr)).dump() + ")";
        rec->Publish();
      }
      if (auto self = weak.lock()) self->MarkDead(why);
    });
  };
  r->exec_id_ = NewExecId();
  auto rec = node->StartExec(cfg.id, r->exec_id_, es);
  if (!rec.ok()) {
    r->Stop();
    return rec.status().Context("start fncall dispatcher");
  }
  std::unique_lock lock(r->mu_);
  bool ok = r->cv_.wait_for(lock, std::chrono::milliseconds(kReadyTimeoutMs),
                            [&] { return r->ready_ || r->dead_; });
  if (!r->ready_) {
    std::string why = r->dead_ ? r->dead_reason_ : ok ? "not ready" : "not ready within 60 s";
    lock.unlock();
    r->Stop();
    return Status(Code::kUnavailable, "start fncall runner", cfg.id,
                  why + " (does the runner image have " + cfg.python + "?)");
  }
  return r;
}

Runner::~Runner() { Stop(); }

void Runner::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  MarkDead("runner stopped");
  Status st = node_->DeleteSandbox(cfg_.id);
  if (!st.ok()) spdlog::warn("fncall runner {}: delete: {}", cfg_.id, st.ToString());
}

bool Runner::healthy() const {
  std::lock_guard lock(mu_);
  return ready_ && !dead_;
}

int Runner::inflight() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [id, p] : pending_) n += std::min(p->left, p->parallel);
  return static_cast<int>(n);
}

uint64_t Runner::served() const {
  std::lock_guard lock(mu_);
  return served_;
}

std::string Runner::zygote() const {
  std::lock_guard lock(mu_);
  return zygote_;
}

nlohmann::json Runner::copied_at_clone() const {
  std::lock_guard lock(mu_);
  return copied_at_clone_;
}

std::string Runner::native_pid1() const {
  std::lock_guard lock(mu_);
  return native_pid1_;
}

void Runner::MarkDead(const std::string& why) {
  std::lock_guard lock(mu_);
  if (dead_) return;
  dead_ = true;
  dead_reason_ = why;
  for (auto& [id, p] : pending_) {
    for (size_t i = 0; i < p->results.size(); ++i)
      if (!p->in[i]) p->results[i] = Status(Code::kUnavailable, "fncall run", cfg_.id, why);
    p->left = 0;
  }
  cv_.notify_all();
}

Status CheckExecRun(const RunRequest& req) {
  if (req.python) return Status();
  uint64_t bytes = req.cwd.size() + 1, items = 0;
  auto add = [&](const std::string& s) { bytes += s.size() + 1, ++items; };
  for (const auto& a : req.argv) add(a);
  for (const auto& [k, v] : req.env) add(k + "=" + v);
  for (const auto& f : req.files) add(f.name);
  for (const auto& c : req.collect) add(c);
  if (bytes > agent::kNativeRequestMaxStrings || items > agent::kNativeRequestMaxItems)
    return Status(Code::kInvalid, "fncall run", "",
                  "the program's arguments and environment take " + std::to_string(bytes) +
                      " bytes in " + std::to_string(items) + " strings; a run may have " +
                      std::to_string(agent::kNativeRequestMaxStrings >> 20) + " MiB in " +
                      std::to_string(agent::kNativeRequestMaxItems) + " at most");
  return Status();
}

Result<RunResult> Runner::Run(const RunRequest& req) {
  return std::move(RunCases(req, {req.stdin_data}, 1).front());
}

std::vector<Result<RunResult>> Runner::RunCases(const RunRequest& req,
                                                const std::vector<std::string>& stdins,
                                                int parallel) {
  json h = {{"t", "run"}, {"env", req.env}, {"cwd", req.cwd}, {"limits", LimitsJson(req.limits)}};
  if (req.python) {
    h["mode"] = "python";
    h["code"] = req.code;
    h["filename"] = req.filename;
    h["args"] = req.args;
  } else {
    h["mode"] = "exec";
    h["argv"] = req.argv;
  }
  if (!req.collect.empty()) h["collect"] = req.collect;
  std::string payload;
  json files = json::array();
  for (const RunFile& f : req.files) {
    files.push_back({{"name", f.name}, {"len", f.data.size()}, {"mode", f.mode}});
    payload += f.data;
  }
  h["files"] = files;
  json lens = json::array();
  for (const std::string& in : stdins) {
    lens.push_back(in.size());
    payload += in;
  }
  h["stdin_lens"] = std::move(lens);
  h["parallel"] = std::max(1, parallel);

  auto p = std::make_shared<Pending>();
  p->left = stdins.size();
  p->parallel = static_cast<size_t>(std::max(1, parallel));
  p->results.assign(stdins.size(), Status(Code::kInternal, "fncall run", cfg_.id, "no result"));
  p->in.assign(stdins.size(), false);
  p->progress = std::chrono::steady_clock::now();
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    if (dead_) {
      for (auto& r : p->results)
        r = Status(Code::kUnavailable, "fncall run", cfg_.id, dead_reason_);
      return std::move(p->results);
    }
    id = next_id_++;
    pending_[id] = p;
  }
  h["id"] = id;
  Status st = node_->WriteExecStdin(cfg_.id, exec_id_, agent::EncodeFrame(h, payload), false);
  if (!st.ok()) MarkDead("write to dispatcher: " + st.ToString());
  std::unique_lock lock(mu_);
  // The runner is hung if no run of the request ends within its wall limit (+ slack) of the
  // previous one, or of the start.
  const auto limit = std::chrono::milliseconds(req.limits.wall_ms + kRunSlackMs);
  while (p->left > 0) {
    if (cv_.wait_until(lock, p->progress + limit) == std::cv_status::timeout &&
        std::chrono::steady_clock::now() >= p->progress + limit && p->left > 0) {
      lock.unlock();
      MarkDead("a run got no result within its wall limit + 15 s");
      lock.lock();
    }
  }
  pending_.erase(id);
  return std::move(p->results);
}

void Runner::OnOutput(int stream, std::string_view data) {
  if (stream == 2) {
    // The dispatcher's own complaints (a traceback if it crashed), line by line to the log.
    for (char c : data) {
      if (c != '\n' && errline_.size() < 2000) {
        errline_ += c;
        continue;
      }
      if (c == '\n') {
        spdlog::warn("fncall runner {}: {}", cfg_.id, errline_);
        errline_.clear();
      }
    }
    return;
  }
  inbuf_.append(data);
  size_t off = 0;
  while (inbuf_.size() - off >= 8) {
    uint32_t total, hlen;
    memcpy(&total, inbuf_.data() + off, 4);
    memcpy(&hlen, inbuf_.data() + off + 4, 4);
    if (total < 4 || hlen > total - 4 || total > (1u << 31)) {
      MarkDead("garbled frame from the dispatcher");
      inbuf_.clear();
      return;
    }
    if (inbuf_.size() - off < 4 + static_cast<size_t>(total)) break;
    std::string header = inbuf_.substr(off + 8, hlen);
    std::string_view payload(inbuf_.data() + off + 8 + hlen, total - 4 - hlen);
    // The dispatcher shares its sandbox with the calls: a frame whose fields have the wrong types
    // takes the runner out of service, never the node down.
    try {
      OnFrame(header, payload);
    } catch (const json::exception& e) {
      MarkDead(std::string("an unreadable frame from the dispatcher: ") + e.what());
      inbuf_.clear();
      return;
    }
    off += 4 + total;
  }
  inbuf_.erase(0, off);
}

void Runner::OnFrame(const std::string& header, std::string_view payload) {
  json h = json::parse(header, nullptr, false);
  if (!h.is_object()) return MarkDead("unreadable frame from the dispatcher");
  const std::string t = h.value("t", "");
  if (t == "ready") {
    if (h.value("zygote", "") != "native" && cfg_.zygote_lib)
      spdlog::warn("fncall runner {}: the zygote runs in Python ({})", cfg_.id,
                   h.value("zygote_why", ""));
    std::lock_guard lock(mu_);
    zygote_ = h.value("zygote", "python");
    copied_at_clone_ = {{"python",
                         {{"pages", h.value("copied_at_clone", uint64_t{0})},
                          {"why", h.value("copy_at_clone_why", "")}}}};
    native_pid1_ = h.value("native_pid1", "");
    ready_ = true;
    cv_.notify_all();
    return;
  }
  if (t == "log") {
    spdlog::warn("fncall runner {}: {}", cfg_.id, h.value("error", h.dump()));
    if (h.value("damaged", false)) MarkDead("damaged: " + h.value("error", "worker failed"));
    return;
  }
  if (t != "result") return;
  std::shared_ptr<Pending> p;
  const size_t index = h.value("case", size_t{0});
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(h.value("id", uint64_t{0}));
    if (it == pending_.end() || index >= it->second->results.size() || it->second->in[index])
      return;
    p = it->second;
  }
  RunResult r;
  r.exit_code = h.value("exit_code", -1);
  r.signal = h.value("signal", 0);
  r.timed_out = h.value("timed_out", false);
  r.output_limit = h.value("output_limit", false);
  r.stdout_truncated = h.value("stdout_truncated", false);
  r.stderr_truncated = h.value("stderr_truncated", false);
  r.wall_ms = h.value("wall_ms", int64_t{0});
  r.cpu_ms = h.value("cpu_ms", int64_t{0});
  r.maxrss_kb = h.value("maxrss_kb", int64_t{0});
  size_t out_len = h.value("stdout_len", size_t{0}), err_len = h.value("stderr_len", size_t{0});
  Status bad;
  if (out_len > payload.size() || err_len > payload.size() - out_len) {
    bad = Status(Code::kInternal, "fncall run", cfg_.id, "result shorter than announced");
  } else {
    r.stdout_data.assign(payload.substr(0, out_len));
    r.stderr_data.assign(payload.substr(out_len, err_len));
    size_t pos = out_len + err_len;
    for (const json& f : h.value("files", json::array())) {
      size_t len = f.value("len", size_t{0});
      if (len > payload.size() - pos) break;
      r.files.push_back(
          {f.value("name", ""), std::string(payload.substr(pos, len)), f.value("mode", 0644u)});
      pos += len;
    }
  }
  if (h.contains("error")) {
    bad = Status(Code::kUnavailable, "fncall run", cfg_.id, h.value("error", "worker failed"));
  }
  bool damaged = h.value("damaged", false);
  {
    std::lock_guard lock(mu_);
    if (!p->in[index] && p->left > 0) {  // not after MarkDead gave up on it
      p->in[index] = true;
      if (bad.ok())
        p->results[index] = std::move(r);
      else
        p->results[index] = bad;
      --p->left;
      ++served_;
      p->progress = std::chrono::steady_clock::now();
    }
    cv_.notify_all();
  }
  if (damaged) MarkDead("damaged: " + h.value("error", "worker failed"));
}

}  // namespace warren::fncall
