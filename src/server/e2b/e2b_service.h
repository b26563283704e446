// E2bService: enough of E2B's API that the unmodified `e2b` SDK runs against Warren, served
// beside the contract's API on the same listener (server/service_chain.h). Two parts:
//   - the control plane (POST /sandboxes, GET /v2/sandboxes, ...), authenticated by
//     X-API-Key, which carries a Warren token with its scopes and quotas;
//   - envd, E2B's in-sandbox daemon (Connect RPCs process.Process/* and
//     filesystem.Filesystem/*, /files, /health), routed by the E2b-Sandbox-Id header and
//     authenticated by the sandbox's access token (X-Access-Token).
// Everything goes through server/routes.h's Api, as the contract's own routes do. docs/e2b.md
// says what is supported and how it differs from E2B.
#pragma once

#include <string>
#include <vector>

#include "server/auth.h"
#include "server/e2b/access_token.h"
#include "server/e2b/fs_tools.h"
#include "server/e2b/process_table.h"
#include "server/e2b/watch_feed.h"
#include "server/http_service.h"
#include "server/routes.h"

namespace warren::server::e2b {

class E2bService : public HttpService {
 public:
  // `secret`: the server's admin token, from which sandboxes' access tokens are derived.
  E2bService(Api* api, TokenRegistry* tokens, std::string_view secret);
  // Waits for the directory watches' threads (each leaves within one listing) to let go of
  // the Api.
  ~E2bService() override;
  const RouteTable& routes() const override;
  std::optional<Principal> Authenticate(std::string_view) const override { return std::nullopt; }
  Status Admit(int route, const Headers& headers) override;
  // E2B's shapes: {"code": 401, ...} for the control plane and /files, Connect's for RPCs.
  HttpReply Refusal(int route, const Status& refused) override;
  HttpReply Handle(int route, HttpRequest& req) override;
  void CountError(Code code) override { api_->CountError(code); }

 private:
  enum class Auth { kRead, kWrite, kEnvd, kHealth };
  using Handler = HttpReply (E2bService::*)(HttpRequest&);
  struct RouteEntry {
    RouteSpec spec;
    Handler handler;
    Auth auth;
  };
  static const std::vector<RouteEntry>& Entries();
  HttpReply Dispatch(const RouteEntry& e, HttpRequest& req);
  // The sandbox's envd access token for `who`, if it may run commands there (`exec`).
  std::optional<std::string> AccessTokenFor(const Principal& who, const std::string& id) const;

  // The principal behind X-API-Key.
  std::optional<Principal> ApiKeyPrincipal(const Headers& h) const;
  const Principal& Caller(const HttpRequest& r) const;

  // Control plane (e2b_service.cc).
  HttpReply Create(HttpRequest& r);
  HttpReply ListV1(HttpRequest& r);
  HttpReply ListV2(HttpRequest& r);
  HttpReply Get(HttpRequest& r);
  HttpReply Kill(HttpRequest& r);
  HttpReply SetTimeout(HttpRequest& r);
  HttpReply Pause(HttpRequest& r);
  HttpReply Connect(HttpRequest& r);
  HttpReply Metrics(HttpRequest& r);

  // envd, process.Process (envd_process.cc).
  HttpReply ProcessStart(HttpRequest& r);
  HttpReply ProcessConnect(HttpRequest& r);
  HttpReply ProcessList(HttpRequest& r);
  HttpReply ProcessSendInput(HttpRequest& r);
  HttpReply ProcessCloseStdin(HttpRequest& r);
  HttpReply ProcessSendSignal(HttpRequest& r);
  HttpReply ProcessUpdate(HttpRequest& r);
  HttpReply Unimplemented(HttpRequest& r);

  // envd, filesystem.Filesystem, /files and /health (envd_files.cc).
  HttpReply FsStat(HttpRequest& r);
  HttpReply FsListDir(HttpRequest& r);
  HttpReply FsMakeDir(HttpRequest& r);
  HttpReply FsMove(HttpRequest& r);
  HttpReply FsRemove(HttpRequest& r);
  HttpReply FsWatchDir(HttpRequest& r);
  HttpReply FilesGet(HttpRequest& r);
  HttpReply FilesPost(HttpRequest& r);
  HttpReply Health(HttpRequest& r);

  // The running sandbox an envd call is for, or the 502 that E2B's proxy answers for one that
  // is gone (the SDK reads it as "not running").
  struct Target {
    std::string id;
    SandboxRecord sb;
  };
  Result<Target> EnvdTarget(const HttpRequest& r);
  static HttpReply Gone(const std::string& id);
  FsTools ToolsFor(const std::string& id);

  Api* api_;
  TokenRegistry* tokens_;
  AccessTokens access_;
  ProcessTable processes_;
  std::shared_ptr<WatchSlots> watches_ = std::make_shared<WatchSlots>();
  // Whom envd calls act as: the access token already named the one sandbox they may touch.
  const Principal envd_{"e2b-envd", {"admin"}, {}};
};

}  // namespace warren::server::e2b
