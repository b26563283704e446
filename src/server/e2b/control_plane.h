// E2B's control plane (api.e2b.app's sandboxes API, as the e2b SDK reads it) in Warren's
// terms: a template is a Warren image, metadata are labels, the timeout is the TTL. This file
// holds the pure parts: the sandbox shapes, the list's filters, order and pages, the error
// body ({"code": <int>, "message"}: the SDK compares `code` with 404 and 409).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/http_service.h"
#include "server/sandbox_record.h"

namespace warren::server::e2b {

// The envd version Warren's envd protocol matches: what the SDK may use (octet-stream
// uploads since 0.5.7) and no more (file metadata, 0.6.2, is not kept).
inline constexpr const char* kEnvdVersion = "0.5.7";

// A template id as a Warren image: "NAME:TAG" as it is, a bare "NAME" is "NAME:latest".
std::string ImageOfTemplate(const std::string& template_id);
// And back: the image's ref without a ":latest".
std::string TemplateOfImage(const std::string& image);

// E2B's state of a Warren sandbox: "running" or "paused"; nullopt for the ones E2B would not
// show (being made, stopping, failed, lost).
std::optional<std::string> E2bState(const SandboxRecord& sb);

// The create/connect answer (`Sandbox`), the detail of GET /sandboxes/{id} and a list's item.
// `access_token`: none for a caller that may not run commands in it.
nlohmann::json SandboxJson(const SandboxRecord& sb, const std::optional<std::string>& access_token);
nlohmann::json DetailJson(const SandboxRecord& sb, const std::optional<std::string>& access_token);
nlohmann::json ListedJson(const SandboxRecord& sb);

struct ListQuery {
  std::vector<std::string> states = {"running", "paused"};
  std::map<std::string, std::string> metadata;
  bool ascending = false;  // by start time
  std::optional<double> started_after;
  std::optional<std::string> template_id;
  size_t limit = 100;
  std::string next_token;
};
// GET /v2/sandboxes's query; `metadata` arrives encoded as the SDK does it (a query string
// whose keys and values are each percent-encoded twice).
Result<ListQuery> ParseListQuery(const Query& q);
struct ListPage {
  std::vector<SandboxRecord> items;
  std::string next_token;  // "" on the last page
};
ListPage Paginate(std::vector<SandboxRecord> all, const ListQuery& q);

// E2B's error body with the status E2B answers a Warren error of this code with.
HttpReply ApiError(const Status& st);
HttpReply ApiError(int status, const std::string& message);

}  // namespace warren::server::e2b
