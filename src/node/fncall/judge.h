// Judging a run: comparing output with what was expected, and naming what happened.
#pragma once

#include <string>
#include <string_view>

#include "node/fncall/runner.h"

namespace warren::fncall {

enum class Compare { kExact, kWhitespace };

// kExact: byte for byte. kWhitespace: the same tokens, however they are separated (spaces,
// tabs, newlines, trailing whitespace).
bool OutputMatches(std::string_view got, std::string_view expected, Compare how);

// How a run ended, before its output is compared: "ok", "time_limit", "memory_limit",
// "output_limit" or "runtime_error". `cpu_limit_ms` and `memory_bytes` are the limits the run
// had. With `rss_counts`, a peak resident size above `memory_bytes` is a memory_limit even if
// the program survived it (false for runtimes that size their own heap, like the JVM).
std::string RunVerdict(const RunResult& r, int64_t cpu_limit_ms, uint64_t memory_bytes,
                       bool rss_counts = true);

// "SIGSEGV" etc.; "" for 0.
std::string SignalName(int sig);

}  // namespace warren::fncall
