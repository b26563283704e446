// The admin token: created on first start at DATA_DIR/admin.token (0600), checked on every
// request but /healthz. (Scoped, hashed per-principal tokens come with the service issue.)
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace warren::server {

// Reads the token file, creating it with a fresh random token if it does not exist.
Result<std::string> LoadOrCreateAdminToken(const std::string& path);

// Constant-time check of an "Authorization: Bearer TOKEN" header value.
bool BearerMatches(std::string_view header, std::string_view token);

}  // namespace warren::server
