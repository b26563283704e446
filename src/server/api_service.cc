#include "server/api_service.h"

namespace warren::server {
namespace {

constexpr uint64_t kJsonBodyLimit = 8ull << 20;
constexpr uint64_t kFileBodyLimit = 64ull << 20;
constexpr uint64_t kLayerBodyLimit = 64ull << 30;

}  // namespace

const std::vector<ApiService::RouteEntry>& ApiService::Entries() {
  using M = Method;
  using S = ApiService;
  // Scopes: sandbox:read / sandbox:write for sandbox records, exec for what runs in or reads
  // from inside a sandbox, image:* for layers, call for fncall, admin for tokens.
  static const std::vector<RouteEntry> kRoutes = {
      {{M::kGet, "/healthz", "", kJsonBodyLimit, BodyTo::kMemory, true}, &S::Health},
      {{M::kHead, "/healthz", "", kJsonBodyLimit, BodyTo::kMemory, true}, &S::Health},
      {{M::kGet, "/metrics", "", kJsonBodyLimit}, &S::Metrics},
      {{M::kGet, "/v1/stats", "", kJsonBodyLimit}, &S::Stats},
      {{M::kGet, "/v1/nodes", "", kJsonBodyLimit}, &S::Nodes},
      {{M::kPost, "/v1/nodes/{name}/cordon", "admin", kJsonBodyLimit}, &S::CordonNode},
      {{M::kPost, "/v1/nodes/{name}/uncordon", "admin", kJsonBodyLimit}, &S::UncordonNode},
      {{M::kPost, "/v1/nodes/{name}/drain", "admin", kJsonBodyLimit}, &S::DrainNode},
      {{M::kGet, "/v1/trajectories/{id}", "sandbox:read", kJsonBodyLimit}, &S::GetTrajectory},
      {{M::kPost, "/v1/leases", "sandbox:write", kJsonBodyLimit}, &S::CreateLease},
      {{M::kPost, "/v1/leases/{id}/renew", "sandbox:write", kJsonBodyLimit}, &S::RenewLease},
      {{M::kDelete, "/v1/leases/{id}", "sandbox:write", kJsonBodyLimit}, &S::ReleaseLease},
      {{M::kGet, "/v1/tokens", "admin", kJsonBodyLimit}, &S::ListTokens},
      {{M::kPost, "/v1/tokens", "admin", kJsonBodyLimit}, &S::CreateToken},
      {{M::kDelete, "/v1/tokens/{name}", "admin", kJsonBodyLimit}, &S::DeleteToken},
      {{M::kGet, "/v1/layers", "image:read", kJsonBodyLimit}, &S::ListLayers},
      {{M::kPost, "/v1/layers", "image:write", kLayerBodyLimit, BodyTo::kFile}, &S::UploadLayer},
      {{M::kGet, "/v1/layers/{ref*}", "image:read", kJsonBodyLimit}, &S::InspectLayer},
      {{M::kDelete, "/v1/layers/{ref*}", "image:write", kJsonBodyLimit}, &S::DeleteLayer},
      {{M::kPost, "/v1/calls", "call", kJsonBodyLimit}, &S::Call},
      {{M::kPost, "/v1/calls:batch", "call", kJsonBodyLimit}, &S::CallBatch},
      {{M::kPost, "/v1/sandboxes:batch", "sandbox:write", kJsonBodyLimit}, &S::CreateBatch},
      {{M::kGet, "/v1/sandboxes", "sandbox:read", kJsonBodyLimit}, &S::ListSandboxes},
      {{M::kPost, "/v1/sandboxes", "sandbox:write", kJsonBodyLimit}, &S::CreateSandbox},
      {{M::kGet, "/v1/sandboxes/{id}", "sandbox:read", kJsonBodyLimit}, &S::GetSandbox},
      {{M::kDelete, "/v1/sandboxes/{id}", "sandbox:write", kJsonBodyLimit}, &S::DeleteSandbox},
      {{M::kPost, "/v1/sandboxes/{id}/exec", "exec", kJsonBodyLimit}, &S::StartExec},
      {{M::kGet, "/v1/sandboxes/{id}/execs", "exec", kJsonBodyLimit}, &S::ExecHistory},
      {{M::kGet, "/v1/sandboxes/{id}/execs/{exec_id}", "exec", kJsonBodyLimit}, &S::GetExec},
      {{M::kGet, "/v1/sandboxes/{id}/execs/{exec_id}/stream", "exec", kJsonBodyLimit},
       &S::StreamExec},
      {{M::kPost, "/v1/sandboxes/{id}/execs/{exec_id}/signal", "exec", kJsonBodyLimit},
       &S::SignalExec},
      // Base64 of 1 MiB of input, and room for the JSON around it.
      {{M::kPost, "/v1/sandboxes/{id}/execs/{exec_id}/input", "exec", 2ull << 20},
       &S::WriteExecInput},
      {{M::kPost, "/v1/sandboxes/{id}/execs/{exec_id}/resize", "exec", kJsonBodyLimit},
       &S::ResizeExec},
      {{M::kGet, "/v1/sandboxes/{id}/screen", "exec", kJsonBodyLimit}, &S::Screen},
      {{M::kPost, "/v1/sandboxes/{id}/input", "exec", kJsonBodyLimit}, &S::Input},
      {{M::kGet, "/v1/sandboxes/{id}/files", "exec", kJsonBodyLimit}, &S::GetFile},
      {{M::kPut, "/v1/sandboxes/{id}/files", "exec", kFileBodyLimit}, &S::PutFile},
      {{M::kGet, "/v1/sandboxes/{id}/archive", "exec", kJsonBodyLimit}, &S::GetArchive},
      {{M::kPut, "/v1/sandboxes/{id}/archive", "exec", kFileBodyLimit}, &S::PutArchive},
      {{M::kPut, "/v1/sandboxes/{id}/network", "sandbox:write", kJsonBodyLimit}, &S::SetNetwork},
      {{M::kPut, "/v1/sandboxes/{id}/filesystem", "sandbox:write", kJsonBodyLimit},
       &S::SetFilesystem},
      {{M::kGet, "/v1/sandboxes/{id}/changes", "sandbox:read", kJsonBodyLimit}, &S::Changes},
      // A snapshot also needs image:write (it makes a layer): checked by the Api.
      {{M::kPost, "/v1/sandboxes/{id}/snapshot", "sandbox:write", kJsonBodyLimit}, &S::Snapshot},
      {{M::kPost, "/v1/sandboxes/{id}/fork", "sandbox:write", kJsonBodyLimit}, &S::Fork},
      {{M::kPost, "/v1/sandboxes/{id}/pause", "sandbox:write", kJsonBodyLimit}, &S::Pause},
      {{M::kPost, "/v1/sandboxes/{id}/resume", "sandbox:write", kJsonBodyLimit}, &S::Resume},
  };
  return kRoutes;
}

const RouteTable& ApiService::routes() const {
  static const RouteTable kTable([] {
    std::vector<RouteSpec> specs;
    for (const auto& r : Entries()) specs.push_back(r.spec);
    return specs;
  }());
  return kTable;
}

HttpReply ApiService::Handle(int route, HttpRequest& req) {
  return (this->*Entries()[static_cast<size_t>(route)].handler)(req);
}

HttpReply ApiService::Health(HttpRequest&) { return HttpReply::Json({{"ok", true}}); }

HttpReply ApiService::Stats(HttpRequest&) { return HttpReply::Json(api_->Stats()); }

HttpReply ApiService::Metrics(HttpRequest&) {
  return HttpReply::Raw(api_->Metrics(), "text/plain; version=0.0.4");
}

HttpReply ApiService::Nodes(HttpRequest&) { return HttpReply::Json(api_->Nodes()); }

HttpReply ApiService::CordonNode(HttpRequest& r) {
  return HttpReply::Of(api_->SetNodeAdmin(r.params.at("name"), Api::NodeAdmin::kCordon));
}

HttpReply ApiService::UncordonNode(HttpRequest& r) {
  return HttpReply::Of(api_->SetNodeAdmin(r.params.at("name"), Api::NodeAdmin::kUncordon));
}

HttpReply ApiService::DrainNode(HttpRequest& r) {
  return HttpReply::Of(api_->SetNodeAdmin(r.params.at("name"), Api::NodeAdmin::kDrain));
}

HttpReply ApiService::GetTrajectory(HttpRequest& r) {
  return HttpReply::Of(api_->GetTrajectory(r.who, r.params.at("id")));
}

HttpReply ApiService::CreateLease(HttpRequest& r) {
  return HttpReply::Of(api_->CreateLease(r.who, r.body));
}

HttpReply ApiService::RenewLease(HttpRequest& r) {
  return HttpReply::Of(api_->RenewLease(r.who, r.params.at("id"), r.body));
}

HttpReply ApiService::ReleaseLease(HttpRequest& r) {
  return HttpReply::Of(api_->ReleaseLease(r.who, r.params.at("id")));
}

HttpReply ApiService::CreateToken(HttpRequest& r) {
  return HttpReply::Of(api_->CreateToken(r.body), 201);
}

HttpReply ApiService::ListTokens(HttpRequest&) { return HttpReply::Json(api_->ListTokens()); }

HttpReply ApiService::DeleteToken(HttpRequest& r) {
  return HttpReply::Of(api_->DeleteToken(r.params.at("name")));
}

HttpReply ApiService::ListLayers(HttpRequest&) { return HttpReply::Of(api_->ListLayers()); }

HttpReply ApiService::UploadLayer(HttpRequest& r) {
  return HttpReply::Of(api_->UploadLayer(r.query, r.body_file), 201);
}

HttpReply ApiService::InspectLayer(HttpRequest& r) {
  return HttpReply::Of(api_->InspectLayer(r.params.at("ref")));
}

HttpReply ApiService::DeleteLayer(HttpRequest& r) {
  return HttpReply::Of(api_->DeleteLayer(r.params.at("ref")));
}

HttpReply ApiService::Call(HttpRequest& r) { return HttpReply::Of(api_->Call(r.who, r.body)); }

HttpReply ApiService::CallBatch(HttpRequest& r) {
  return HttpReply::Of(api_->CallBatch(r.who, r.body));
}

HttpReply ApiService::CreateBatch(HttpRequest& r) {
  return HttpReply::Of(api_->CreateBatch(r.who, r.body));
}

HttpReply ApiService::CreateSandbox(HttpRequest& r) {
  return HttpReply::Of(api_->CreateSandbox(r.who, r.body), 201);
}

HttpReply ApiService::ListSandboxes(HttpRequest& r) {
  return HttpReply::Of(api_->ListSandboxes(r.who, r.query));
}

HttpReply ApiService::GetSandbox(HttpRequest& r) {
  return HttpReply::Of(api_->GetSandbox(r.who, r.params.at("id")));
}

HttpReply ApiService::DeleteSandbox(HttpRequest& r) {
  return HttpReply::Of(api_->DeleteSandbox(r.who, r.params.at("id")));
}

HttpReply ApiService::StartExec(HttpRequest& r) {
  auto started = api_->StartExec(r.who, r.params.at("id"), r.body);
  if (!started.ok()) return HttpReply::Error(started.status());
  if (!started->wait) return HttpReply::Json({{"exec_id", started->rec->id()}}, 202);
  return HttpReply::WaitExec(started->rec);
}

HttpReply ApiService::ExecHistory(HttpRequest& r) {
  return HttpReply::Of(api_->ExecHistory(r.who, r.params.at("id")));
}

HttpReply ApiService::GetExec(HttpRequest& r) {
  auto rec = api_->GetExec(r.who, r.params.at("id"), r.params.at("exec_id"));
  if (!rec.ok()) return HttpReply::Error(rec.status());
  return HttpReply::Json((*rec)->ResultJson());
}

HttpReply ApiService::StreamExec(HttpRequest& r) {
  auto after = AfterSeq(r.query);
  if (!after.ok()) return HttpReply::Error(after.status());
  auto rec = api_->GetExec(r.who, r.params.at("id"), r.params.at("exec_id"));
  if (!rec.ok()) return HttpReply::Error(rec.status());
  return HttpReply::StreamExec(*rec, *after);
}

HttpReply ApiService::SignalExec(HttpRequest& r) {
  const std::string& id = r.params.at("id");
  const std::string& exec_id = r.params.at("exec_id");
  auto rec = api_->GetExec(r.who, id, exec_id);
  if (!rec.ok()) return HttpReply::Error(rec.status());
  Status st = api_->SignalExec(r.who, id, exec_id, r.body);
  return st.ok() ? HttpReply::Json((*rec)->ResultJson()) : HttpReply::Error(st);
}

HttpReply ApiService::Screen(HttpRequest& r) {
  auto png = api_->Screen(r.who, r.params.at("id"));
  if (!png.ok()) return HttpReply::Error(png.status());
  return HttpReply::Raw(std::move(*png), "image/png");
}

HttpReply ApiService::Input(HttpRequest& r) {
  return HttpReply::Of(api_->Input(r.who, r.params.at("id"), r.body));
}

HttpReply ApiService::WriteExecInput(HttpRequest& r) {
  return HttpReply::Of(
      api_->WriteExecInput(r.who, r.params.at("id"), r.params.at("exec_id"), r.body));
}

HttpReply ApiService::ResizeExec(HttpRequest& r) {
  return HttpReply::Of(api_->ResizeExec(r.who, r.params.at("id"), r.params.at("exec_id"), r.body));
}

HttpReply ApiService::PutFile(HttpRequest& r) {
  return HttpReply::Of(api_->PutFile(r.who, r.params.at("id"), r.query, r.body));
}

HttpReply ApiService::GetFile(HttpRequest& r) {
  auto data = api_->GetFile(r.who, r.params.at("id"), r.query);
  if (!data.ok()) return HttpReply::Error(data.status());
  return HttpReply::Raw(std::move(*data), "application/octet-stream");
}

HttpReply ApiService::PutArchive(HttpRequest& r) {
  return HttpReply::Of(api_->PutArchive(r.who, r.params.at("id"), r.query, r.body));
}

HttpReply ApiService::GetArchive(HttpRequest& r) {
  auto tar = api_->GetArchive(r.who, r.params.at("id"), r.query);
  if (!tar.ok()) return HttpReply::Error(tar.status());
  return HttpReply::Raw(std::move(*tar), "application/x-tar");
}

HttpReply ApiService::SetNetwork(HttpRequest& r) {
  return HttpReply::Of(api_->SetNetwork(r.who, r.params.at("id"), r.body));
}

HttpReply ApiService::SetFilesystem(HttpRequest& r) {
  return HttpReply::Of(api_->SetFilesystem(r.who, r.params.at("id"), r.body));
}

HttpReply ApiService::Changes(HttpRequest& r) {
  return HttpReply::Of(api_->Changes(r.who, r.params.at("id"), r.query));
}

HttpReply ApiService::Snapshot(HttpRequest& r) {
  return HttpReply::Of(api_->Snapshot(r.who, r.params.at("id"), r.body), 201);
}

HttpReply ApiService::Fork(HttpRequest& r) {
  return HttpReply::Of(api_->Fork(r.who, r.params.at("id"), r.body), 201);
}

HttpReply ApiService::Pause(HttpRequest& r) {
  return HttpReply::Of(api_->SetPaused(r.who, r.params.at("id"), true));
}

HttpReply ApiService::Resume(HttpRequest& r) {
  return HttpReply::Of(api_->SetPaused(r.who, r.params.at("id"), false));
}

}  // namespace warren::server
