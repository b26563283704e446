#include "cluster/node_service.h"

#include <signal.h>

#include "agent/desktop_messages.h"
#include "node/density/density_types.h"
#include "node/node_wire.h"

namespace warren::cluster {
namespace {

using nlohmann::json;
using server::HttpReply;
using server::HttpRequest;
using server::Method;
using server::RouteSpec;

constexpr uint64_t kJsonBodyLimit = 8ull << 20;
constexpr uint64_t kFileBodyLimit = 64ull << 20;
constexpr size_t kMaxLost = 4096;

// A node failure as its wire error, with the HTTP status of its code.
HttpReply Fail(const Status& st) {
  return HttpReply::Json(node::ToWire(st), server::HttpStatusOf(st.code()));
}
HttpReply Done(const Status& st) { return st.ok() ? HttpReply::NoContent() : Fail(st); }

Result<json> BodyJson(const HttpRequest& r, const char* what) {
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return Invalid(std::string(what) + ": the body is not JSON");
  return j;
}

// A query number (unsigned), `fallback` when absent.
Result<uint64_t> QueryNumber(const server::Query& q, const char* key, uint64_t fallback) {
  auto it = q.find(key);
  if (it == q.end()) return fallback;
  const std::string& v = it->second;
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
    return Invalid(std::string("`") + key + "` must be a number", v);
  return static_cast<uint64_t>(std::stoull(v));
}

std::string QueryString(const server::Query& q, const char* key) {
  auto it = q.find(key);
  return it == q.end() ? "" : it->second;
}

}  // namespace

NodeService::NodeService(node::NodeApi* node, std::string credential)
    : node_(node), credential_(std::move(credential)) {
  node_->SetOnSandboxLost([this](const std::string& id, const std::string& reason) {
    MutexLock lock(&mu_);
    lost_.push_back({++lost_seq_, id, reason});
    if (lost_.size() > kMaxLost) lost_.erase(lost_.begin());
  });
}

const std::vector<NodeService::RouteEntry>& NodeService::Entries() {
  using M = Method;
  using S = NodeService;
  constexpr const char* kScope = "node";
  static const std::vector<RouteEntry> kRoutes = {
      {{M::kGet, "/healthz", "", kJsonBodyLimit, server::BodyTo::kMemory, true}, &S::Health},
      {{M::kGet, "/node/v1/info", kScope, kJsonBodyLimit}, &S::Info},
      {{M::kGet, "/node/v1/lost", kScope, kJsonBodyLimit}, &S::Lost},
      {{M::kPost, "/node/v1/reap", kScope, kJsonBodyLimit}, &S::Reap},
      {{M::kPost, "/node/v1/sandboxes", kScope, kJsonBodyLimit}, &S::Create},
      {{M::kPost, "/node/v1/calls", kScope, kJsonBodyLimit}, &S::Call},
      {{M::kPost, "/node/v1/calls:batch", kScope, kJsonBodyLimit}, &S::CallBatch},
      {{M::kDelete, "/node/v1/sandboxes/{id}", kScope, kJsonBodyLimit}, &S::Delete},
      {{M::kPost, "/node/v1/sandboxes/{id}/adopt", kScope, kJsonBodyLimit}, &S::Adopt},
      {{M::kGet, "/node/v1/sandboxes/{id}/running", kScope, kJsonBodyLimit}, &S::Running},
      {{M::kPut, "/node/v1/sandboxes/{id}/network", kScope, kJsonBodyLimit}, &S::SetNetwork},
      {{M::kPut, "/node/v1/sandboxes/{id}/filesystem", kScope, kJsonBodyLimit}, &S::SetFilesystem},
      {{M::kGet, "/node/v1/sandboxes/{id}/changes", kScope, kJsonBodyLimit}, &S::Changes},
      {{M::kPost, "/node/v1/sandboxes/{id}/snapshot", kScope, kJsonBodyLimit}, &S::Snapshot},
      {{M::kPost, "/node/v1/sandboxes/{id}/fork", kScope, kJsonBodyLimit}, &S::PrepareFork},
      {{M::kDelete, "/node/v1/forks/{token}", kScope, 0}, &S::EndFork},
      {{M::kGet, "/node/v1/sandboxes/{id}/density", kScope, kJsonBodyLimit}, &S::Density},
      {{M::kPost, "/node/v1/sandboxes/{id}/pause", kScope, kJsonBodyLimit}, &S::Pause},
      {{M::kPost, "/node/v1/sandboxes/{id}/resume", kScope, kJsonBodyLimit}, &S::Resume},
      {{M::kPut, "/node/v1/sandboxes/{id}/execs/{exec_id}", kScope, kJsonBodyLimit}, &S::StartExec},
      {{M::kGet, "/node/v1/sandboxes/{id}/execs", kScope, kJsonBodyLimit}, &S::ExecHistory},
      {{M::kGet, "/node/v1/sandboxes/{id}/execs/{exec_id}", kScope, kJsonBodyLimit}, &S::GetExec},
      {{M::kGet, "/node/v1/sandboxes/{id}/execs/{exec_id}/stream", kScope, kJsonBodyLimit},
       &S::StreamExec},
      {{M::kPost, "/node/v1/sandboxes/{id}/execs/{exec_id}/signal", kScope, kJsonBodyLimit},
       &S::SignalExec},
      {{M::kPost, "/node/v1/sandboxes/{id}/execs/{exec_id}/stdin", kScope, kFileBodyLimit},
       &S::ExecStdin},
      {{M::kPost, "/node/v1/sandboxes/{id}/execs/{exec_id}/resize", kScope, kJsonBodyLimit},
       &S::ResizeExec},
      {{M::kGet, "/node/v1/sandboxes/{id}/screen", kScope, kJsonBodyLimit}, &S::Screen},
      {{M::kPost, "/node/v1/sandboxes/{id}/input", kScope, kJsonBodyLimit}, &S::DesktopInput},
      {{M::kPut, "/node/v1/sandboxes/{id}/files", kScope, kFileBodyLimit}, &S::PutFile},
      {{M::kGet, "/node/v1/sandboxes/{id}/files", kScope, kJsonBodyLimit}, &S::GetFile},
  };
  return kRoutes;
}

const server::RouteTable& NodeService::routes() const {
  static const server::RouteTable kTable([] {
    std::vector<RouteSpec> specs;
    for (const auto& r : Entries()) specs.push_back(r.spec);
    return specs;
  }());
  return kTable;
}

std::optional<server::Principal> NodeService::Authenticate(std::string_view authorization) const {
  if (credential_.empty() || !server::BearerMatches(authorization, credential_))
    return std::nullopt;
  return server::Principal{"cluster", {"node"}, {}};
}

HttpReply NodeService::Handle(int route, HttpRequest& req) {
  return (this->*Entries()[static_cast<size_t>(route)].handler)(req);
}

HttpReply NodeService::Health(HttpRequest&) { return HttpReply::Json({{"ok", true}}); }

HttpReply NodeService::Info(HttpRequest&) { return HttpReply::Json(node_->Info()); }

HttpReply NodeService::Lost(HttpRequest& r) {
  auto after = QueryNumber(r.query, "after", 0);
  if (!after.ok()) return Fail(after.status());
  json ids = json::array(), reasons = json::array();
  MutexLock lock(&mu_);
  // A caller further behind than what is kept must list its sandboxes again: say so.
  const bool gap = !lost_.empty() && lost_.front().seq > *after + 1;
  for (const auto& l : lost_)
    if (l.seq > *after) {
      ids.push_back(l.id);
      reasons.push_back(l.reason);
    }
  return HttpReply::Json({{"ids", ids}, {"reasons", reasons}, {"last", lost_seq_}, {"gap", gap}});
}

HttpReply NodeService::Reap(HttpRequest& r) {
  auto body = BodyJson(r, "reap");
  if (!body.ok()) return Fail(body.status());
  std::set<std::string> keep;
  if (body->contains("also_keep")) {
    if (!(*body)["also_keep"].is_array()) return Fail(Invalid("reap: `also_keep` is a list"));
    for (const auto& id : (*body)["also_keep"]) {
      if (!id.is_string()) return Fail(Invalid("reap: `also_keep` holds sandbox ids"));
      keep.insert(id.get<std::string>());
    }
  }
  return HttpReply::Json({{"reaped", node_->ReapUnadopted(keep)}});
}

// A call's request and result are the contract's documents: the node's fncall service checks
// the request, and the API server passes the result on as it is.
HttpReply NodeService::Call(HttpRequest& r) {
  auto body = BodyJson(r, "call");
  if (!body.ok()) return Fail(body.status());
  auto result = node_->RunCall(*body, /*batch=*/false);
  return result.ok() ? HttpReply::Json(*result) : Fail(result.status());
}

HttpReply NodeService::CallBatch(HttpRequest& r) {
  auto body = BodyJson(r, "call batch");
  if (!body.ok()) return Fail(body.status());
  auto result = node_->RunCall(*body, /*batch=*/true);
  return result.ok() ? HttpReply::Json(*result) : Fail(result.status());
}

HttpReply NodeService::Create(HttpRequest& r) {
  auto body = BodyJson(r, "create sandbox");
  if (!body.ok()) return Fail(body.status());
  auto spec = node::ParseWireSandboxSpec(*body);
  if (!spec.ok()) return Fail(spec.status());
  auto rt = node_->CreateSandbox(*spec);
  if (!rt.ok()) return Fail(rt.status());
  return HttpReply::Json(node::ToWire(*rt), 201);
}

HttpReply NodeService::Delete(HttpRequest& r) {
  return Done(node_->DeleteSandbox(r.params.at("id")));
}

HttpReply NodeService::Adopt(HttpRequest& r) {
  return Done(node_->AdoptSandbox(r.params.at("id")));
}

HttpReply NodeService::Running(HttpRequest& r) {
  return HttpReply::Json({{"running", node_->RunningExecs(r.params.at("id"))}});
}

HttpReply NodeService::SetNetwork(HttpRequest& r) {
  auto body = BodyJson(r, "set network");
  if (!body.ok()) return Fail(body.status());
  auto policy = node::ParseWirePolicy(*body);
  if (!policy.ok()) return Fail(policy.status());
  return Done(node_->SetNetwork(r.params.at("id"), *policy));
}

HttpReply NodeService::SetFilesystem(HttpRequest& r) {
  auto body = BodyJson(r, "set filesystem");
  if (!body.ok()) return Fail(body.status());
  auto policy = node::ParseWireFsPolicy(*body);
  if (!policy.ok()) return Fail(policy.status());
  return Done(node_->SetFilesystem(r.params.at("id"), *policy));
}

HttpReply NodeService::Changes(HttpRequest& r) {
  auto limit = QueryNumber(r.query, "limit", 1000);
  if (!limit.ok()) return Fail(limit.status());
  std::string under = QueryString(r.query, "under");
  if (under.empty()) under = "/";
  auto report = node_->Changes(r.params.at("id"), under, static_cast<size_t>(*limit));
  if (!report.ok()) return Fail(report.status());
  return HttpReply::Json(node::ToWire(*report));
}

HttpReply NodeService::Snapshot(HttpRequest& r) {
  auto body = BodyJson(r, "snapshot");
  if (!body.ok()) return Fail(body.status());
  auto spec = node::ParseWireSnapshotSpec(*body);
  if (!spec.ok()) return Fail(spec.status());
  auto layer = node_->Snapshot(r.params.at("id"), *spec);
  if (!layer.ok()) return Fail(layer.status());
  return HttpReply::Json(node::ToWire(*layer));
}

HttpReply NodeService::PrepareFork(HttpRequest& r) {
  auto fork = node_->PrepareFork(r.params.at("id"));
  if (!fork.ok()) return Fail(fork.status());
  return HttpReply::Json(node::ToWire(*fork));
}

HttpReply NodeService::EndFork(HttpRequest& r) {
  const std::string& token = r.params.at("token");
  if (!node::IsForkToken(token)) return Fail(Invalid("end fork: not a fork's token"));
  return Done(node_->EndFork(token));
}

HttpReply NodeService::Density(HttpRequest& r) {
  auto d = node_->Density(r.params.at("id"));
  if (!d.ok()) return Fail(d.status());
  return HttpReply::Json(node::density::SandboxDensityJson(*d));
}

HttpReply NodeService::Pause(HttpRequest& r) {
  return Done(node_->PauseSandbox(r.params.at("id")));
}

HttpReply NodeService::Resume(HttpRequest& r) {
  return Done(node_->ResumeSandbox(r.params.at("id")));
}

HttpReply NodeService::StartExec(HttpRequest& r) {
  auto body = BodyJson(r, "start exec");
  if (!body.ok()) return Fail(body.status());
  auto spec = node::ParseWireExecSpec(*body);
  if (!spec.ok()) return Fail(spec.status());
  auto rec = node_->StartExec(r.params.at("id"), r.params.at("exec_id"), *spec);
  if (!rec.ok()) return Fail(rec.status());
  return HttpReply::Json({{"exec_id", (*rec)->id()}}, 201);
}

HttpReply NodeService::ExecHistory(HttpRequest& r) {
  auto execs = node_->ExecHistory(r.params.at("id"));
  if (!execs.ok()) return Fail(execs.status());
  return HttpReply::Json(node::ToWire(*execs));
}

HttpReply NodeService::GetExec(HttpRequest& r) {
  auto rec = node_->GetExec(r.params.at("id"), r.params.at("exec_id"));
  if (!rec.ok()) return Fail(rec.status());
  return HttpReply::Json((*rec)->ResultJson());
}

HttpReply NodeService::StreamExec(HttpRequest& r) {
  auto after = server::AfterSeq(r.query);
  if (!after.ok()) return Fail(after.status());
  auto rec = node_->GetExec(r.params.at("id"), r.params.at("exec_id"));
  if (!rec.ok()) return Fail(rec.status());
  return HttpReply::StreamExec(*rec, *after, /*exact=*/true);
}

HttpReply NodeService::SignalExec(HttpRequest& r) {
  auto body = BodyJson(r, "signal exec");
  if (!body.ok()) return Fail(body.status());
  if (!body->is_object() || !body->contains("signal") || !(*body)["signal"].is_number_integer())
    return Fail(Invalid("signal exec: `signal` is a signal number"));
  const int sig = (*body)["signal"].get<int>();
  if (sig <= 0 || sig >= NSIG) return Fail(Invalid("signal exec: no such signal"));
  return Done(node_->SignalExec(r.params.at("id"), r.params.at("exec_id"), sig));
}

HttpReply NodeService::ExecStdin(HttpRequest& r) {
  const bool eof = QueryString(r.query, "eof") == "1";
  return Done(node_->WriteExecStdin(r.params.at("id"), r.params.at("exec_id"), r.body, eof));
}

HttpReply NodeService::ResizeExec(HttpRequest& r) {
  auto body = BodyJson(r, "resize exec");
  if (!body.ok()) return Fail(body.status());
  auto size = node::ParseWireTerminalSize(*body);
  if (!size.ok()) return Fail(size.status());
  return Done(node_->ResizeExec(r.params.at("id"), r.params.at("exec_id"), *size));
}

HttpReply NodeService::Screen(HttpRequest& r) {
  auto png = node_->Screenshot(r.params.at("id"));
  if (!png.ok()) return Fail(png.status());
  return HttpReply::Raw(std::move(*png), "image/png");
}

HttpReply NodeService::DesktopInput(HttpRequest& r) {
  auto body = BodyJson(r, "send input");
  if (!body.ok()) return Fail(body.status());
  auto steps = agent::ParseInputSteps(*body);
  if (!steps.ok()) return Fail(steps.status());
  return Done(node_->DesktopInput(r.params.at("id"), *steps));
}

HttpReply NodeService::PutFile(HttpRequest& r) {
  auto mode = QueryNumber(r.query, "mode", 0644);
  if (!mode.ok()) return Fail(mode.status());
  if (*mode > 07777) return Fail(Invalid("put file: `mode` is a permission number"));
  return Done(node_->WriteFile(r.params.at("id"), QueryString(r.query, "path"),
                               static_cast<uint32_t>(*mode), r.body));
}

HttpReply NodeService::GetFile(HttpRequest& r) {
  auto max = QueryNumber(r.query, "max", kFileBodyLimit);
  if (!max.ok()) return Fail(max.status());
  auto data = node_->ReadFile(r.params.at("id"), QueryString(r.query, "path"), *max);
  if (!data.ok()) return Fail(data.status());
  return HttpReply::Raw(std::move(*data), "application/octet-stream");
}

}  // namespace warren::cluster
