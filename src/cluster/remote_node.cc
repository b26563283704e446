#include "cluster/remote_node.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "agent/desktop_messages.h"
#include "base/utf8.h"
#include "node/density/density_types.h"
#include "node/node_wire.h"

namespace warren::cluster {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

RemoteNode::RemoteNode(std::string name, std::string url, std::string credential,
                       RemoteNodeOptions opts)
    : name_(std::move(name)),
      url_(std::move(url)),
      credential_(std::move(credential)),
      opts_(opts),
      poll_client_(std::make_unique<client::HttpClient>(url_, credential_)) {
  poll_client_->DetectDeadPeer(opts_.dead_peer_s);
  lost_poller_ = std::thread([this] { PollLost(); });
}

RemoteNode::~RemoteNode() {
  MutexLock lock(&mu_);
  stop_ = true;
  for (auto& [raw, feeder] : feeding_) feeder.client->Abort();
  poll_client_->Abort();
  cv_.notify_all();
  // Feeders leave feeding_ as they end.
  while (!feeding_.empty()) lock.Wait(cv_);
  lock.Unlock();
  if (lost_poller_.joinable()) lost_poller_.join();
}

std::string RemoteNode::SandboxPath(const std::string& id) {
  return "/node/v1/sandboxes/" + client::UrlEncode(id);
}

std::unique_ptr<client::HttpClient> RemoteNode::TakeClient() {
  {
    MutexLock lock(&pool_mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<client::HttpClient>(url_, credential_);
  c->DetectDeadPeer(opts_.dead_peer_s);
  return c;
}

void RemoteNode::GiveClient(std::unique_ptr<client::HttpClient> c) {
  MutexLock lock(&pool_mu_);
  // As many kept-alive connections as requests ran at once, up to a bound.
  if (idle_.size() < 64) idle_.push_back(std::move(c));
}

Result<client::Response> RemoteNode::Call(const std::string& what, const std::string& method,
                                          const std::string& target, std::string_view body,
                                          const std::string& content_type,
                                          client::HttpClient* own) {
  std::unique_ptr<client::HttpClient> pooled;
  if (!own) pooled = TakeClient();
  client::HttpClient* c = own ? own : pooled.get();
  auto r = c->Request(method, target, std::string(body), content_type);
  if (!r.ok()) {
    // The node cannot be reached: the caller says unavailable (503 with Retry-After).
    return Status(Code::kUnavailable, what, name_, "node unreachable: " + r.status().message())
        .WithRetryAfter(1);
  }
  if (pooled) GiveClient(std::move(pooled));
  if (r->status / 100 == 2) return r;
  return node::ParseWireStatus(json::parse(r->body, nullptr, false), what);
}

Result<json> RemoteNode::RunCall(const json& request, bool batch) {
  return CallJson(batch ? "call batch" : "call", "POST",
                  batch ? "/node/v1/calls:batch" : "/node/v1/calls", request);
}

Result<json> RemoteNode::CallJson(const std::string& what, const std::string& method,
                                  const std::string& target, const json& body) {
  auto r = WARREN_TRY(Call(what, method, target, body.is_null() ? "" : body.dump()));
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return Internal(what, name_, "the node answered malformed JSON");
  return j;
}

Status RemoteNode::CallDone(const std::string& what, const std::string& method,
                            const std::string& target, const json& body) {
  return Call(what, method, target, body.is_null() ? "" : body.dump()).status();
}

Result<node::SandboxRuntime> RemoteNode::CreateSandbox(const node::NodeSandboxSpec& spec) {
  auto j = WARREN_TRY(CallJson("create sandbox", "POST", "/node/v1/sandboxes", node::ToWire(spec)));
  return node::ParseWireRuntime(j);
}

Status RemoteNode::DeleteSandbox(const std::string& id) {
  Status st = CallDone("delete sandbox", "DELETE", SandboxPath(id));
  if (st.ok()) {
    // Its mirrors end with it (their streams end as the node drops the records).
    MutexLock lock(&mu_);
    const std::string prefix = id + "/";
    for (auto it = mirrors_.lower_bound(prefix);
         it != mirrors_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
      it = it->second->done() ? mirrors_.erase(it) : std::next(it);
  }
  return st;
}

Status RemoteNode::AdoptSandbox(const std::string& id) {
  return CallDone("adopt sandbox", "POST", SandboxPath(id) + "/adopt");
}

int RemoteNode::RunningExecs(const std::string& id) {
  auto j = CallJson("count running commands", "GET", SandboxPath(id) + "/running");
  // Unknown counts as busy: the idle reaper must not delete a sandbox it cannot see.
  if (!j.ok() || !j->contains("running") || !(*j)["running"].is_number_integer()) return 1;
  return (*j)["running"].get<int>();
}

int RemoteNode::ReapUnadopted(const std::set<std::string>& also_keep) {
  auto j = CallJson("reap", "POST", "/node/v1/reap", {{"also_keep", also_keep}});
  if (!j.ok()) {
    spdlog::warn("node {}: reap: {}", name_, j.status().ToString());
    return 0;
  }
  return j->value("reaped", 0);
}

Status RemoteNode::SetNetwork(const std::string& id, const net::Policy& policy) {
  return CallDone("set network", "PUT", SandboxPath(id) + "/network", node::ToWire(policy));
}

Status RemoteNode::SetFilesystem(const std::string& id, const isolation::FsPolicy& policy) {
  return CallDone("set filesystem", "PUT", SandboxPath(id) + "/filesystem", node::ToWire(policy));
}

Result<isolation::ChangeReport> RemoteNode::Changes(const std::string& id, const std::string& under,
                                                    size_t limit) {
  auto j = WARREN_TRY(CallJson("list changes", "GET",
                               SandboxPath(id) + "/changes?under=" + client::UrlEncode(under) +
                                   "&limit=" + std::to_string(limit)));
  return node::ParseWireChanges(j);
}

Result<node::SnapshotLayer> RemoteNode::Snapshot(const std::string& id,
                                                 const node::SnapshotSpec& spec) {
  auto j = WARREN_TRY(
      CallJson("snapshot sandbox", "POST", SandboxPath(id) + "/snapshot", node::ToWire(spec)));
  return node::ParseWireSnapshotLayer(j);
}

Result<node::MemoryFork> RemoteNode::PrepareFork(const std::string& id) {
  auto j = WARREN_TRY(CallJson("fork memory", "POST", SandboxPath(id) + "/fork", json::object()));
  return node::ParseWireMemoryFork(j);
}

Status RemoteNode::EndFork(const std::string& token) {
  if (!node::IsForkToken(token)) return Invalid("end fork: not a fork's token");
  return CallDone("end fork", "DELETE", "/node/v1/forks/" + token);
}

Status RemoteNode::PauseSandbox(const std::string& id) {
  return CallDone("pause sandbox", "POST", SandboxPath(id) + "/pause");
}

Status RemoteNode::ResumeSandbox(const std::string& id) {
  return CallDone("resume sandbox", "POST", SandboxPath(id) + "/resume");
}

Result<node::density::SandboxDensity> RemoteNode::Density(const std::string& id) {
  auto j = WARREN_TRY(CallJson("read density", "GET", SandboxPath(id) + "/density"));
  return node::density::ParseSandboxDensity(j);
}

Result<std::shared_ptr<node::ExecRecord>> RemoteNode::StartExec(const std::string& id,
                                                                const std::string& exec_id,
                                                                const node::ExecSpec& spec) {
  if (spec.channel) return Invalid("start exec: channel commands run only on their own node");
  // Made first, so that the caller's hook (a trajectory's finisher) is set before the command
  // can end; the node caps the output, the mirror holds what the node sends.
  auto rec = std::make_shared<node::ExecRecord>(exec_id, id, UINT64_MAX, spec.binary);
  if (spec.on_record) spec.on_record(rec);
  const std::string key = id + "/" + exec_id;
  {
    MutexLock lock(&mu_);
    if (stop_) return Status(Code::kUnavailable, "start exec", name_, "shutting down");
    if (mirrors_.count(key)) return Status(Code::kConflict, "start exec", exec_id, "exists");
    mirrors_[key] = rec;
  }
  Status st =
      CallDone("start exec", "PUT", SandboxPath(id) + "/execs/" + client::UrlEncode(exec_id),
               node::ToWire(spec));
  if (!st.ok()) {
    MutexLock lock(&mu_);
    mirrors_.erase(key);
    return st;
  }
  StartFeeding(key, rec);
  return rec;
}

Result<std::shared_ptr<node::ExecRecord>> RemoteNode::GetExec(const std::string& id,
                                                              const std::string& exec_id) {
  const std::string key = id + "/" + exec_id;
  {
    MutexLock lock(&mu_);
    if (auto it = mirrors_.find(key); it != mirrors_.end()) return it->second;
  }
  // Not mirrored here (started through another API server, or forgotten): the node says
  // whether it exists and whether its output is binary, then it is mirrored from its start.
  auto result = WARREN_TRY(
      CallJson("get exec", "GET", SandboxPath(id) + "/execs/" + client::UrlEncode(exec_id)));
  auto rec =
      std::make_shared<node::ExecRecord>(exec_id, id, UINT64_MAX, result.contains("stdout_b64"));
  {
    MutexLock lock(&mu_);
    if (stop_) return Status(Code::kUnavailable, "get exec", name_, "shutting down");
    auto [it, fresh] = mirrors_.emplace(key, rec);
    if (!fresh) return it->second;  // another request mirrored it meanwhile
  }
  StartFeeding(key, rec);
  return rec;
}

void RemoteNode::StartFeeding(const std::string& key,
                              const std::shared_ptr<node::ExecRecord>& rec) {
  const size_t slash = key.find('/');
  const std::string target = SandboxPath(key.substr(0, slash)) + "/execs/" +
                             client::UrlEncode(key.substr(slash + 1)) + "/stream";
  auto client = std::make_unique<client::HttpClient>(url_, credential_);
  client->DetectDeadPeer(opts_.dead_peer_s);
  client::HttpClient* raw = client.get();
  auto last_line = std::make_shared<std::atomic<int64_t>>(NowMs());
  {
    MutexLock lock(&mu_);
    feeding_[raw] = Feeder{std::move(client), last_line};
  }
  std::thread([this, rec, target, raw, key, last_line] {
    Feed(rec, target, raw, last_line.get());
    MutexLock lock(&mu_);
    Retire(key, rec);
    feeding_.erase(raw);
    cv_.notify_all();
  }).detach();
}

void RemoteNode::Feed(std::shared_ptr<node::ExecRecord> rec, std::string target,
                      client::HttpClient* client, std::atomic<int64_t>* last_line_ms) {
  auto unreachable_since = Clock::time_point{};
  int backoff_ms = 100;
  std::string why;
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stop_) break;
    }
    bool ended = false, received = false;
    std::string bad;
    Status st = client->StreamLines(
        target + "?after=" + std::to_string(rec->last_seq()), [&](std::string_view line) {
          if (ended || !bad.empty()) return;
          last_line_ms->store(NowMs());
          received = true;
          auto j = json::parse(line, nullptr, false);
          if (!j.is_object() || !j.contains("seq") || !j["seq"].is_number_unsigned()) {
            bad = "a malformed stream line";
            return;
          }
          const uint64_t seq = j["seq"].get<uint64_t>();
          if (j.contains("result")) {
            rec->FinishWith(j["result"], seq);
            ended = true;
            return;
          }
          if (j.value("heartbeat", false)) return;
          std::string data;
          if (!j.contains("data_b64") || !j["data_b64"].is_string() ||
              !Base64Decode(j["data_b64"].get<std::string>(), &data)) {
            bad = "a stream line without its bytes";
            return;
          }
          rec->AppendChunk(seq, j.value("stream", "") == "stderr" ? 2 : 1, data);
        });
    if (ended) return;
    if (!bad.empty()) {
      why = "the node sent " + bad;
      break;
    }
    if (st.code() == Code::kNotFound) {
      why = "the node no longer holds this command";
      break;
    }
    // The stream broke (the node restarted, the network, a proxy): resume after the last
    // chunk held, unless the node stays away.
    // A stream that was delivering until now counts as a fresh break; the clock of how long
    // the node has been away starts at the first failed attempt after it.
    const auto now = Clock::now();
    const bool was_flowing = st.ok() || received;
    if (was_flowing) {
      unreachable_since = now;
      backoff_ms = 100;
    } else if (unreachable_since == Clock::time_point{}) {
      unreachable_since = now;
    }
    last_line_ms->store(NowMs());  // the stall clock restarts with the next attempt
    if (now - unreachable_since > std::chrono::seconds(opts_.give_up_s)) {
      why = "node " + name_ + " unreachable: " + st.message();
      break;
    }
    MutexLock lock(&mu_);
    const auto until = Clock::now() + std::chrono::milliseconds(backoff_ms);
    while (!stop_ && Clock::now() < until) lock.WaitUntil(cv_, until);
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
  node::ExecOutcome outcome;
  outcome.error = why.empty() ? "the API server stopped following this command" : why;
  rec->Finish(outcome);
}

void RemoteNode::Retire(const std::string& key, const std::shared_ptr<node::ExecRecord>& rec) {
  auto it = mirrors_.find(key);
  if (it == mirrors_.end() || it->second != rec) return;
  finished_.emplace_back(key, rec->bytes());
  finished_bytes_ += rec->bytes();
  // Finished mirrors are kept for later reads up to a count and a size; older ones are read
  // again from the node when asked for.
  while (!finished_.empty() &&
         (finished_.size() > opts_.keep_finished || finished_bytes_ > opts_.keep_finished_bytes)) {
    const auto& [oldest, bytes] = finished_.front();
    if (auto m = mirrors_.find(oldest); m != mirrors_.end() && m->second->done()) mirrors_.erase(m);
    finished_bytes_ -= std::min(finished_bytes_, bytes);
    finished_.pop_front();
  }
}

Result<std::vector<node::ExecSummary>> RemoteNode::ExecHistory(const std::string& id) {
  auto j = WARREN_TRY(CallJson("list execs", "GET", SandboxPath(id) + "/execs"));
  return node::ParseWireExecHistory(j);
}

Status RemoteNode::SignalExec(const std::string& id, const std::string& exec_id, int sig) {
  return CallDone("signal exec", "POST",
                  SandboxPath(id) + "/execs/" + client::UrlEncode(exec_id) + "/signal",
                  {{"signal", sig}});
}

Status RemoteNode::WriteExecStdin(const std::string& id, const std::string& exec_id,
                                  std::string_view data, bool eof) {
  return Call("write stdin", "POST",
              SandboxPath(id) + "/execs/" + client::UrlEncode(exec_id) + "/stdin" +
                  (eof ? "?eof=1" : ""),
              data, "application/octet-stream")
      .status();
}

Status RemoteNode::ResizeExec(const std::string& id, const std::string& exec_id,
                              node::TerminalSize size) {
  return CallDone("resize exec", "POST",
                  SandboxPath(id) + "/execs/" + client::UrlEncode(exec_id) + "/resize",
                  {{"rows", size.rows}, {"cols", size.cols}});
}

Status RemoteNode::WriteFile(const std::string& id, const std::string& path, uint32_t mode,
                             std::string_view data) {
  return Call("write file", "PUT",
              SandboxPath(id) + "/files?path=" + client::UrlEncode(path) +
                  "&mode=" + std::to_string(mode),
              data, "application/octet-stream")
      .status();
}

Result<std::string> RemoteNode::ReadFile(const std::string& id, const std::string& path,
                                         uint64_t max) {
  auto r = WARREN_TRY(Call(
      "read file", "GET",
      SandboxPath(id) + "/files?path=" + client::UrlEncode(path) + "&max=" + std::to_string(max)));
  return std::move(r.body);
}

Result<std::string> RemoteNode::Screenshot(const std::string& id) {
  auto r = WARREN_TRY(Call("take a screenshot", "GET", SandboxPath(id) + "/screen"));
  return std::move(r.body);
}

Status RemoteNode::DesktopInput(const std::string& id, const std::vector<agent::InputStep>& steps) {
  return Call("send input", "POST", SandboxPath(id) + "/input",
              agent::InputStepsToJson(steps).dump(), "application/json")
      .status();
}

json RemoteNode::Info() {
  auto j = CallJson("node info", "GET", "/node/v1/info");
  if (j.ok()) return *j;
  return {{"name", name_}, {"error", j.status().ToString()}};
}

void RemoteNode::SetOnSandboxLost(node::SandboxLostFn fn) {
  MutexLock lock(&mu_);
  on_lost_ = std::move(fn);
}

void RemoteNode::AbortStalled() {
  const int64_t now = NowMs();
  for (auto& [raw, feeder] : feeding_)
    if (now - feeder.last_line_ms->load() > int64_t{opts_.stall_s} * 1000) {
      spdlog::warn("node {}: an exec stream was silent for {} s: reconnecting", name_,
                   opts_.stall_s);
      feeder.last_line_ms->store(now);
      feeder.client->Abort();
    }
}

void RemoteNode::PollLost() {
  uint64_t after = 0;
  for (;;) {
    {
      MutexLock lock(&mu_);
      const auto until = Clock::now() + std::chrono::milliseconds(opts_.lost_poll_ms);
      while (!stop_ && Clock::now() < until) lock.WaitUntil(cv_, until);
      if (stop_) return;
      AbortStalled();
    }
    auto r = Call("list lost sandboxes", "GET", "/node/v1/lost?after=" + std::to_string(after), {},
                  "application/json", poll_client_.get());
    if (!r.ok()) continue;
    auto j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array()) continue;
    node::SandboxLostFn lost;
    {
      MutexLock lock(&mu_);
      lost = on_lost_;
    }
    // `reasons` runs beside `ids` (a node before it sends none: the agent exited).
    const json none = json::array();
    const json& reasons = j.contains("reasons") && j["reasons"].is_array() ? j["reasons"] : none;
    for (size_t i = 0; i < j["ids"].size(); ++i) {
      const json& id = j["ids"][i];
      const std::string reason =
          i < reasons.size() && reasons[i].is_string() ? reasons[i].get<std::string>() : "";
      if (id.is_string() && lost) lost(id.get<std::string>(), reason);
    }
    // A node that restarted numbers from 1 again: `last` is taken as it comes.
    after = j.value("last", after);
  }
}

}  // namespace warren::cluster
