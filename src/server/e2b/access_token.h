// The envd access token of a sandbox (X-Access-Token): HMAC-SHA256 of its id under a key of
// the server's, so that it needs no storage, survives restarts, and shows nothing about other
// sandboxes. Whoever holds it may act inside that one sandbox, as with E2B's own.
#pragma once

#include <string>
#include <string_view>

namespace warren::server::e2b {

class AccessTokens {
 public:
  // `secret`: the server's (its admin token); the key is derived from it, never it.
  explicit AccessTokens(std::string_view secret);
  std::string For(std::string_view sandbox_id) const;
  // Constant-time.
  bool Matches(std::string_view sandbox_id, std::string_view token) const;

 private:
  std::string key_;
};

}  // namespace warren::server::e2b
