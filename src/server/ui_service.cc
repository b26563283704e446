#include "server/ui_service.h"

#include <vector>

#include "server/ui_assets.h"

namespace warren::server {
namespace {

constexpr uint64_t kNoBody = 1024;

enum Route { kIndex, kFile };

// "/ui" and "/ui/" are one path here (empty segments do not count): the page names its
// files by absolute paths, so either address works.
std::vector<RouteSpec> Routes() {
  return {{Method::kGet, "/ui", "", kNoBody, BodyTo::kMemory, true},
          {Method::kGet, "/ui/{file*}", "", kNoBody, BodyTo::kMemory, true}};
}

HttpReply Asset(std::string_view name) {
  for (const UiAsset& a : UiAssets()) {
    if (a.name != name) continue;
    HttpReply r = HttpReply::Raw(std::string(a.data), std::string(a.content_type));
    // Only this server's own scripts, styles and API: no CDN, no inline script, no framing.
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'self'; img-src 'self' data: blob:; "
                           "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    r.headers.emplace_back("X-Content-Type-Options", "nosniff");
    r.headers.emplace_back("Referrer-Policy", "no-referrer");
    // A new binary serves new files: never an old script against a new API.
    r.headers.emplace_back("Cache-Control", "no-cache");
    return r;
  }
  return HttpReply::Error(NotFound("dashboard file", std::string(name)));
}

}  // namespace

UiService::UiService() : table_(Routes()) {}

HttpReply UiService::Handle(int route, HttpRequest& req) {
  // Pages are addressed by the fragment (/ui#/sandboxes/ID): any other path is a file.
  if (route == kIndex) return Asset("index.html");
  return Asset(req.params.at("file"));
}

}  // namespace warren::server
