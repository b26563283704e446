#include "node/fncall/judge.h"

#include <signal.h>
#include <string.h>

#include <cctype>

namespace warren::fncall {
namespace {

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// The next whitespace-separated token of `s` from `*pos`, advancing it.
std::string_view NextToken(std::string_view s, size_t* pos) {
  while (*pos < s.size() && IsSpace(s[*pos])) ++*pos;
  size_t start = *pos;
  while (*pos < s.size() && !IsSpace(s[*pos])) ++*pos;
  return s.substr(start, *pos - start);
}

bool Contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

}  // namespace

bool OutputMatches(std::string_view got, std::string_view expected, Compare how) {
  if (how == Compare::kExact) return got == expected;
  size_t a = 0, b = 0;
  while (true) {
    std::string_view x = NextToken(got, &a), y = NextToken(expected, &b);
    if (x != y) return false;
    if (x.empty()) return true;
  }
}

std::string RunVerdict(const RunResult& r, int64_t cpu_limit_ms, uint64_t memory_bytes,
                       bool rss_counts) {
  if (r.output_limit) return "output_limit";
  const bool killed = r.signal == SIGKILL || r.signal == SIGXCPU;
  if (r.timed_out || (killed && r.cpu_ms >= cpu_limit_ms - cpu_limit_ms / 20)) return "time_limit";
  // A file grown past RLIMIT_FSIZE.
  if (r.signal == SIGXFSZ) return "output_limit";
  const bool failed = r.exit_code != 0 || r.signal != 0;
  if (memory_bytes > 0) {
    const uint64_t peak = static_cast<uint64_t>(r.maxrss_kb) * 1024;
    // Over the limit; or failed close to it, which is how a C program that never checks
    // malloc ends under an address-space limit (a NULL it then writes to).
    const bool over =
        rss_counts && (peak > memory_bytes || (failed && peak >= memory_bytes / 10 * 8));
    // An allocation refused under the address-space limit shows only as the runtime's own
    // complaint: Python's MemoryError, C++'s bad_alloc, glibc's and the JVM's messages.
    const std::string& e = r.stderr_data;
    const bool said_so = Contains(e, "MemoryError") || Contains(e, "std::bad_alloc") ||
                         Contains(e, "Cannot allocate memory") || Contains(e, "OutOfMemoryError") ||
                         Contains(e, "out of memory") ||
                         Contains(e, "JavaScript heap out of memory");
    if (over || (failed && said_so)) return "memory_limit";
  }
  return failed ? "runtime_error" : "ok";
}

std::string SignalName(int sig) {
  if (sig <= 0) return "";
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig);
}

}  // namespace warren::fncall
