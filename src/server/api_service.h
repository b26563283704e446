// The public API as an HTTP service (server/http_service.h): the contract's routes, each
// with the token scope it needs, mapped onto Api's typed actions. `warren serve` and
// `warren apiserver` serve it.
#pragma once

#include "server/http_service.h"
#include "server/routes.h"

namespace warren::server {

class ApiService : public HttpService {
 public:
  // Both outlive the service.
  ApiService(Api* api, const TokenRegistry* tokens) : api_(api), tokens_(tokens) {}

  const RouteTable& routes() const override;
  std::optional<Principal> Authenticate(std::string_view authorization) const override {
    return tokens_->Authenticate(authorization);
  }
  HttpReply Handle(int route, HttpRequest& req) override;
  std::string UploadPath() const override { return api_->TempPath("upload"); }
  void CountError(Code code) override { api_->CountError(code); }

 private:
  using Handler = HttpReply (ApiService::*)(HttpRequest&);
  struct RouteEntry {
    RouteSpec spec;
    Handler handler;
  };
  static const std::vector<RouteEntry>& Entries();

  // One handler per route (see Entries()).
  HttpReply Health(HttpRequest&);
  HttpReply Metrics(HttpRequest&);
  HttpReply Stats(HttpRequest&);
  HttpReply Nodes(HttpRequest&);
  HttpReply CordonNode(HttpRequest&);
  HttpReply UncordonNode(HttpRequest&);
  HttpReply DrainNode(HttpRequest&);
  HttpReply GetTrajectory(HttpRequest&);
  HttpReply CreateLease(HttpRequest&);
  HttpReply RenewLease(HttpRequest&);
  HttpReply ReleaseLease(HttpRequest&);
  HttpReply CreateToken(HttpRequest&);
  HttpReply ListTokens(HttpRequest&);
  HttpReply DeleteToken(HttpRequest&);
  HttpReply ListLayers(HttpRequest&);
  HttpReply InspectLayer(HttpRequest&);
  HttpReply UploadLayer(HttpRequest&);
  HttpReply DeleteLayer(HttpRequest&);
  HttpReply Call(HttpRequest&);
  HttpReply CallBatch(HttpRequest&);
  HttpReply CreateBatch(HttpRequest&);
  HttpReply CreateSandbox(HttpRequest&);
  HttpReply ListSandboxes(HttpRequest&);
  HttpReply GetSandbox(HttpRequest&);
  HttpReply DeleteSandbox(HttpRequest&);
  HttpReply StartExec(HttpRequest&);
  HttpReply ExecHistory(HttpRequest&);
  HttpReply GetExec(HttpRequest&);
  HttpReply StreamExec(HttpRequest&);
  HttpReply SignalExec(HttpRequest&);
  HttpReply WriteExecInput(HttpRequest&);
  HttpReply Screen(HttpRequest&);
  HttpReply Input(HttpRequest&);
  HttpReply ResizeExec(HttpRequest&);
  HttpReply PutFile(HttpRequest&);
  HttpReply GetFile(HttpRequest&);
  HttpReply PutArchive(HttpRequest&);
  HttpReply GetArchive(HttpRequest&);
  HttpReply SetNetwork(HttpRequest&);
  HttpReply SetFilesystem(HttpRequest&);
  HttpReply Changes(HttpRequest&);
  HttpReply Snapshot(HttpRequest&);
  HttpReply Fork(HttpRequest&);
  HttpReply Pause(HttpRequest&);
  HttpReply Resume(HttpRequest&);

  Api* const api_;
  const TokenRegistry* const tokens_;
};

}  // namespace warren::server
