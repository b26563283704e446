// Random identifiers and tokens from getrandom(2).
#pragma once

#include <cstddef>
#include <string>

namespace warren {

// Lowercase hex string of `bytes` random bytes.
std::string RandomHex(size_t bytes);
// Sandbox ids: "sb-" + 16 hex digits. Exec ids: "ex-" + 12 hex digits.
std::string NewSandboxId();
std::string NewExecId();
// Wall clock as RFC 3339 UTC with milliseconds.
std::string NowRfc3339();
std::string Rfc3339(double unix_seconds);
// Our own "YYYY-MM-DDTHH:MM:SS.mmmZ" back to seconds since the epoch; 0 if malformed.
double ParseRfc3339(const std::string& s);
double UnixNow();     // wall clock, seconds since the epoch
double NowSeconds();  // monotonic

}  // namespace warren
