#include "server/e2b/e2b_service.h"

#include <cmath>

#include "base/ids.h"
#include "server/api_types.h"
#include "server/e2b/connect_protocol.h"
#include "server/e2b/control_plane.h"

namespace warren::server::e2b {

using nlohmann::json;

namespace {

constexpr uint64_t kJsonLimit = 8ull << 20;
// Uploads go into the sandbox as they arrive (its disk bounds them); this bounds one request.
constexpr uint64_t kUploadLimit = 64ull << 30;
// E2B's default life of a sandbox.
constexpr double kDefaultTimeoutS = 300;

}  // namespace

E2bService::E2bService(Api* api, TokenRegistry* tokens, std::string_view secret)
    : api_(api), tokens_(tokens), access_(secret) {}

E2bService::~E2bService() { watches_->WaitIdle(std::chrono::seconds(40)); }

const std::vector<E2bService::RouteEntry>& E2bService::Entries() {
  using M = Method;
  using S = E2bService;
  using A = Auth;
  // Every route is public to the front end: E2B's credentials are not bearer tokens, so Admit
  // checks them (before any body is read).
  auto r = [](M m, std::string_view path, uint64_t limit = kJsonLimit,
              BodyTo to = BodyTo::kMemory) { return RouteSpec{m, path, "", limit, to, true}; };
  static const std::vector<RouteEntry> kRoutes = {
      {r(M::kPost, "/sandboxes"), &S::Create, A::kWrite},
      {r(M::kPost, "/v2/sandboxes"), &S::Create, A::kWrite},
      {r(M::kGet, "/sandboxes"), &S::ListV1, A::kRead},
      {r(M::kGet, "/v2/sandboxes"), &S::ListV2, A::kRead},
      {r(M::kGet, "/sandboxes/{id}"), &S::Get, A::kRead},
      {r(M::kGet, "/v2/sandboxes/{id}"), &S::Get, A::kRead},
      {r(M::kDelete, "/sandboxes/{id}"), &S::Kill, A::kWrite},
      {r(M::kDelete, "/v2/sandboxes/{id}"), &S::Kill, A::kWrite},
      {r(M::kPost, "/sandboxes/{id}/timeout"), &S::SetTimeout, A::kWrite},
      {r(M::kPost, "/v2/sandboxes/{id}/timeout"), &S::SetTimeout, A::kWrite},
      {r(M::kPost, "/sandboxes/{id}/pause"), &S::Pause, A::kWrite},
      {r(M::kPost, "/v2/sandboxes/{id}/pause"), &S::Pause, A::kWrite},
      {r(M::kPost, "/sandboxes/{id}/resume"), &S::Connect, A::kWrite},
      {r(M::kPost, "/sandboxes/{id}/connect"), &S::Connect, A::kWrite},
      {r(M::kPost, "/v2/sandboxes/{id}/connect"), &S::Connect, A::kWrite},
      {r(M::kGet, "/sandboxes/{id}/metrics"), &S::Metrics, A::kRead},
      {r(M::kPost, "/process.Process/Start"), &S::ProcessStart, A::kEnvd},
      {r(M::kPost, "/process.Process/Connect"), &S::ProcessConnect, A::kEnvd},
      {r(M::kPost, "/process.Process/List"), &S::ProcessList, A::kEnvd},
      {r(M::kPost, "/process.Process/SendInput", 16ull << 20), &S::ProcessSendInput, A::kEnvd},
      {r(M::kPost, "/process.Process/CloseStdin"), &S::ProcessCloseStdin, A::kEnvd},
      {r(M::kPost, "/process.Process/SendSignal"), &S::ProcessSendSignal, A::kEnvd},
      {r(M::kPost, "/process.Process/Update"), &S::ProcessUpdate, A::kEnvd},
      {r(M::kPost, "/process.Process/StreamInput"), &S::Unimplemented, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/Stat"), &S::FsStat, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/ListDir"), &S::FsListDir, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/MakeDir"), &S::FsMakeDir, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/Move"), &S::FsMove, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/Remove"), &S::FsRemove, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/WatchDir"), &S::FsWatchDir, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/CreateWatcher"), &S::Unimplemented, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/GetWatcherEvents"), &S::Unimplemented, A::kEnvd},
      {r(M::kPost, "/filesystem.Filesystem/RemoveWatcher"), &S::Unimplemented, A::kEnvd},
      {r(M::kGet, "/files"), &S::FilesGet, A::kEnvd},
      {r(M::kPost, "/files", kUploadLimit, BodyTo::kStream), &S::FilesPost, A::kEnvd},
      {r(M::kGet, "/health"), &S::Health, A::kHealth},
  };
  return kRoutes;
}

const RouteTable& E2bService::routes() const {
  static const RouteTable kTable([] {
    std::vector<RouteSpec> specs;
    for (const auto& e : Entries()) specs.push_back(e.spec);
    return specs;
  }());
  return kTable;
}

std::optional<Principal> E2bService::ApiKeyPrincipal(const Headers& h) const {
  auto it = h.find("x-api-key");
  if (it == h.end() || it->second.empty()) return std::nullopt;
  return tokens_->Authenticate("Bearer " + it->second);
}

Status E2bService::Admit(int route, const Headers& h) {
  const RouteEntry& e = Entries()[static_cast<size_t>(route)];
  if (e.auth == Auth::kHealth) return Status::Ok();
  if (e.auth == Auth::kEnvd) {
    auto id = h.find("e2b-sandbox-id");
    auto token = h.find("x-access-token");
    if (id == h.end() || token == h.end() || !access_.Matches(id->second, token->second))
      return Status(Code::kUnauthorized, "", "",
                    "missing or wrong X-Access-Token for the E2b-Sandbox-Id sandbox");
    return Status::Ok();
  }
  auto who = ApiKeyPrincipal(h);
  if (!who) return Status(Code::kUnauthorized, "", "", "missing or wrong X-API-Key");
  const char* scope = e.auth == Auth::kRead ? "sandbox:read" : "sandbox:write";
  if (!who->Allows(scope))
    return Status(Code::kForbidden, "", "",
                  std::string("this key lacks the `") + scope + "` scope");
  return Status::Ok();
}

HttpReply E2bService::Refusal(int route, const Status& refused) {
  const RouteEntry& e = Entries()[static_cast<size_t>(route)];
  if (e.spec.path.find('.') != std::string_view::npos) return UnaryError(refused);
  return ApiError(refused);
}

HttpReply E2bService::Handle(int route, HttpRequest& req) {
  const RouteEntry& e = Entries()[static_cast<size_t>(route)];
  try {
    return Dispatch(e, req);
  } catch (const nlohmann::json::exception& ex) {
    // A field of the wrong type (value() and get<>() throw): the caller's mistake.
    const std::string why = std::string("a field has the wrong type: ") + ex.what();
    if (e.auth == Auth::kEnvd && e.spec.path.find('.') != std::string_view::npos)
      return UnaryError("invalid_argument", why);
    return ApiError(400, why);
  }
}

HttpReply E2bService::Dispatch(const RouteEntry& e, HttpRequest& req) {
  if (e.auth == Auth::kRead || e.auth == Auth::kWrite) {
    // Admitted a moment ago; a key removed meanwhile is refused now.
    auto who = ApiKeyPrincipal(req.headers);
    if (!who) return ApiError(401, "missing or wrong X-API-Key");
    HttpRequest as{*who,          req.params,  req.query,      std::move(req.body),
                   req.body_file, req.headers, req.body_stream};
    return (this->*e.handler)(as);
  }
  return (this->*e.handler)(req);
}

const Principal& E2bService::Caller(const HttpRequest& r) const { return r.who; }

std::optional<std::string> E2bService::AccessTokenFor(const Principal& who,
                                                      const std::string& id) const {
  // The token runs commands and writes files in the sandbox: the contract's `exec` scope.
  if (!who.Allows("exec")) return std::nullopt;
  return access_.For(id);
}

HttpReply E2bService::Create(HttpRequest& r) {
  json body = r.body.empty() ? json::object() : json::parse(r.body, nullptr, false);
  if (!body.is_object()) return ApiError(400, "the request body must be a JSON object");
  for (const char* unsupported : {"mcp", "volumeMounts", "iam"})
    if (body.contains(unsupported) && !body[unsupported].is_null())
      return ApiError(400, std::string("`") + unsupported + "` is not supported by Warren");
  if (body.value("autoPause", false))
    return ApiError(400, "`autoPause` is not supported by Warren (pause explicitly)");
  std::string tpl = "base";
  if (body.contains("templateID")) {
    if (!body["templateID"].is_string()) return ApiError(400, "`templateID` must be a string");
    tpl = body["templateID"].get<std::string>();
  }
  double timeout = kDefaultTimeoutS;
  if (body.contains("timeout") && !body["timeout"].is_null()) {
    if (!body["timeout"].is_number() || body["timeout"].get<double>() < 1)
      return ApiError(400, "`timeout` must be a number of seconds, at least 1");
    timeout = body["timeout"].get<double>();
  }
  // In the contract's shape, so the contract's checks (image ref, label and env sizes) apply.
  json spec = {{"image", ImageOfTemplate(tpl)},
               {"ttl_s", static_cast<uint64_t>(std::ceil(timeout))}};
  if (body.contains("metadata") && !body["metadata"].is_null()) spec["labels"] = body["metadata"];
  if (body.contains("envVars") && !body["envVars"].is_null()) spec["env"] = body["envVars"];
  const bool internet = body.value("allow_internet_access", false);
  spec["network"] = {{"mode", internet ? "egress" : "none"}};
  auto parsed = ParseSandboxSpec(spec);
  if (!parsed.ok()) return ApiError(parsed.status());
  auto sb = api_->CreateSandbox(Caller(r), *parsed);
  if (!sb.ok()) {
    // An image that does not exist is E2B's unknown template.
    if (sb.status().code() == Code::kNotFound)
      return ApiError(404, "template `" + tpl + "` not found: " + PublicMessage(sb.status()));
    return ApiError(sb.status());
  }
  return HttpReply::Json(SandboxJson(*sb, AccessTokenFor(Caller(r), sb->id)), 201);
}

HttpReply E2bService::ListV1(HttpRequest& r) {
  auto q = ParseListQuery(r.query);
  if (!q.ok()) return ApiError(q.status());
  q->states = {"running"};
  q->limit = SIZE_MAX;
  q->next_token.clear();
  auto all = api_->OwnedSandboxes(Caller(r));
  if (!all.ok()) return ApiError(all.status());
  json out = json::array();
  for (const auto& sb : Paginate(std::move(*all), *q).items) out.push_back(ListedJson(sb));
  return HttpReply::Json(out);
}

HttpReply E2bService::ListV2(HttpRequest& r) {
  auto q = ParseListQuery(r.query);
  if (!q.ok()) return ApiError(q.status());
  auto all = api_->OwnedSandboxes(Caller(r));
  if (!all.ok()) return ApiError(all.status());
  ListPage page = Paginate(std::move(*all), *q);
  json out = json::array();
  for (const auto& sb : page.items) out.push_back(ListedJson(sb));
  HttpReply reply = HttpReply::Json(out);
  if (!page.next_token.empty()) reply.headers.emplace_back("X-Next-Token", page.next_token);
  return reply;
}

HttpReply E2bService::Get(HttpRequest& r) {
  const std::string& id = r.params.at("id");
  auto sb = api_->FindSandbox(Caller(r), id);
  if (!sb.ok()) return ApiError(sb.status());
  if (!E2bState(*sb)) return ApiError(404, "sandbox " + id + " is not running");
  return HttpReply::Json(DetailJson(*sb, AccessTokenFor(Caller(r), id)));
}

HttpReply E2bService::Kill(HttpRequest& r) {
  const std::string& id = r.params.at("id");
  Status st = api_->DeleteSandbox(Caller(r), id);
  if (!st.ok()) return ApiError(st);
  processes_.ForgetSandbox(id);
  return HttpReply::NoContent();
}

HttpReply E2bService::SetTimeout(HttpRequest& r) {
  json body = json::parse(r.body.empty() ? "{}" : r.body, nullptr, false);
  if (!body.is_object() || !body.contains("timeout") || !body["timeout"].is_number())
    return ApiError(400, "`timeout` (seconds) is required");
  auto sb = api_->SetTimeout(Caller(r), r.params.at("id"), body["timeout"].get<double>());
  if (!sb.ok()) return ApiError(sb.status());
  return HttpReply::NoContent();
}

HttpReply E2bService::Pause(HttpRequest& r) {
  const std::string& id = r.params.at("id");
  auto sb = api_->FindSandbox(Caller(r), id);
  if (!sb.ok()) return ApiError(sb.status());
  if (sb->state == SandboxState::kPaused) return ApiError(409, "sandbox " + id + " is paused");
  auto paused = api_->SetPaused(Caller(r), id, true);
  if (!paused.ok()) return ApiError(paused.status());
  return HttpReply::NoContent();
}

HttpReply E2bService::Connect(HttpRequest& r) {
  const std::string& id = r.params.at("id");
  json body = json::parse(r.body.empty() ? "{}" : r.body, nullptr, false);
  if (!body.is_object()) return ApiError(400, "the request body must be a JSON object");
  auto sb = api_->FindSandbox(Caller(r), id);
  if (!sb.ok()) return ApiError(sb.status());
  if (!E2bState(*sb)) return ApiError(404, "sandbox " + id + " is not running");
  int status = 200;
  if (sb->state == SandboxState::kPaused) {
    auto resumed = api_->SetPaused(Caller(r), id, false);
    if (!resumed.ok()) return ApiError(resumed.status());
    status = 201;
  }
  // The timeout given (or E2B's default) counts from now, but never shortens its life.
  double timeout = kDefaultTimeoutS;
  if (body.contains("timeout") && body["timeout"].is_number())
    timeout = body["timeout"].get<double>();
  const double left =
      ParseRfc3339(sb->created_at) + static_cast<double>(sb->spec.ttl_s) - UnixNow();
  if (timeout > left) {
    auto extended = api_->SetTimeout(Caller(r), id, timeout);
    if (!extended.ok()) return ApiError(extended.status());
  }
  auto now = api_->FindSandbox(Caller(r), id);
  if (!now.ok()) return ApiError(now.status());
  return HttpReply::Json(SandboxJson(*now, AccessTokenFor(Caller(r), id)), status);
}

HttpReply E2bService::Metrics(HttpRequest& r) {
  auto sb = api_->FindSandbox(Caller(r), r.params.at("id"));
  if (!sb.ok()) return ApiError(sb.status());
  return HttpReply::Json(json::array());  // not kept: no samples
}

HttpReply E2bService::Unimplemented(HttpRequest&) {
  return UnaryError("unimplemented", "not served by Warren's envd (docs/e2b.md)");
}

}  // namespace warren::server::e2b
