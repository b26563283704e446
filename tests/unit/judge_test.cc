#include "node/fncall/judge.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "node/fncall/languages.h"

namespace warren::fncall {
namespace {

TEST(Judge, ExactCompareIsByteForByte) {
  EXPECT_TRUE(OutputMatches("5\n", "5\n", Compare::kExact));
  EXPECT_FALSE(OutputMatches("5", "5\n", Compare::kExact));
  EXPECT_FALSE(OutputMatches("5 \n", "5\n", Compare::kExact));
}

TEST(Judge, WhitespaceCompareLooksAtTokens) {
  EXPECT_TRUE(OutputMatches("1 2\n3\n", "1  2 3", Compare::kWhitespace));
  EXPECT_TRUE(OutputMatches("", "\n \t", Compare::kWhitespace));
  EXPECT_FALSE(OutputMatches("1 2", "12", Compare::kWhitespace));
  EXPECT_FALSE(OutputMatches("1 2 3", "1 2", Compare::kWhitespace));
  EXPECT_FALSE(OutputMatches("1 2", "1 2 3", Compare::kWhitespace));
}

RunResult Ran(int exit_code, int sig = 0) {
  RunResult r;
  r.exit_code = exit_code;
  r.signal = sig;
  return r;
}

TEST(Judge, Verdicts) {
  const int64_t cpu = 1000;
  const uint64_t mem = 64ull << 20;
  EXPECT_EQ(RunVerdict(Ran(0), cpu, mem), "ok");
  EXPECT_EQ(RunVerdict(Ran(3), cpu, mem), "runtime_error");
  EXPECT_EQ(RunVerdict(Ran(-1, SIGSEGV), cpu, mem), "runtime_error");
  RunResult t = Ran(-1, SIGKILL);
  t.timed_out = true;
  EXPECT_EQ(RunVerdict(t, cpu, mem), "time_limit");
  RunResult c = Ran(-1, SIGKILL);  // RLIMIT_CPU's hard limit
  c.cpu_ms = 1000;
  EXPECT_EQ(RunVerdict(c, cpu, mem), "time_limit");
  RunResult k = Ran(-1, SIGKILL);  // killed early, not by the CPU limit
  k.cpu_ms = 10;
  EXPECT_EQ(RunVerdict(k, cpu, mem), "runtime_error");
  RunResult o = Ran(-1, SIGKILL);
  o.output_limit = true;
  EXPECT_EQ(RunVerdict(o, cpu, mem), "output_limit");
  EXPECT_EQ(RunVerdict(Ran(-1, SIGXFSZ), cpu, mem), "output_limit");
  RunResult m = Ran(1);
  m.stderr_data = "Traceback...\nMemoryError\n";
  EXPECT_EQ(RunVerdict(m, cpu, mem), "memory_limit");
  RunResult big = Ran(0);
  big.maxrss_kb = 65 * 1024;
  EXPECT_EQ(RunVerdict(big, cpu, mem), "memory_limit");
  EXPECT_EQ(RunVerdict(big, cpu, mem, /*rss_counts=*/false), "ok");
  RunResult near = Ran(-1, SIGSEGV);  // malloc returned NULL close to the limit
  near.maxrss_kb = 60 * 1024;
  EXPECT_EQ(RunVerdict(near, cpu, mem), "memory_limit");
  near.maxrss_kb = 10 * 1024;
  EXPECT_EQ(RunVerdict(near, cpu, mem), "runtime_error");
  RunResult said = Ran(0);  // printing the word is not running out of memory
  said.stdout_data = "MemoryError";
  EXPECT_EQ(RunVerdict(said, cpu, mem), "ok");
}

TEST(Judge, SignalNames) {
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(0), "");
}

TEST(Languages, KnownAndAliases) {
  EXPECT_TRUE(FindLanguage("python")->in_process_python);
  EXPECT_EQ(FindLanguage("c++")->name, "cpp");
  EXPECT_FALSE(FindLanguage("cobol").has_value());
  EXPECT_FALSE(FindLanguage("cpp")->compile.empty());
}

}  // namespace
}  // namespace warren::fncall
