// The dashboard (docs/design.md, "Dashboard"): its page, script and style at /ui, built into
// the binary (server/ui_assets.h), nothing fetched from elsewhere. The files hold no data and
// need no token; the page asks the API for everything with the token the user gives it, so
// it shows what that token's scopes allow and nothing more.
#pragma once

#include <optional>
#include <string_view>

#include "server/http_service.h"
#include "server/route_table.h"

namespace warren::server {

class UiService : public HttpService {
 public:
  UiService();
  const RouteTable& routes() const override { return table_; }
  // Its routes are public: no token is ever asked for, or looked at.
  std::optional<Principal> Authenticate(std::string_view) const override { return std::nullopt; }
  HttpReply Handle(int route, HttpRequest& req) override;

 private:
  RouteTable table_;
};

}  // namespace warren::server
