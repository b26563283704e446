// For the envd handlers of E2bService: declares `Target& t` for the call's sandbox, or
// returns the 502 of a sandbox that is gone (or the error that kept it from being read).
#pragma once

#define WARREN_E2B_TARGET(t, r)                                                               \
  auto t##_or = EnvdTarget(r);                                                                \
  if (!t##_or.ok()) {                                                                         \
    if (t##_or.status().code() == Code::kNotFound) return Gone((r).Header("e2b-sandbox-id")); \
    return UnaryError(t##_or.status());                                                       \
  }                                                                                           \
  Target& t = *t##_or
