// Pages a child wrote, once pinned by the parent (sys/copy_at_clone.h), are copied at every
// later fork: a child writing them then takes no fault, where it took one a page before; and
// pages the parent writes itself after each fork stay writable in it. Real kernel, no root:
// io_uring's registered buffers, as the fncall zygote uses them.
#include "sys/copy_at_clone.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

namespace warren::sys {
namespace {

constexpr size_t kPage = 4096, kPages = 64, kWritten = 24, kOwn = 8;

// Runs `fn` in a forked child and returns what it wrote on the pipe as u64s.
template <typename Fn>
std::vector<uint64_t> InChild(Fn fn) {
  int p[2];
  EXPECT_EQ(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::vector<uint64_t> out = fn();
    const char* at = reinterpret_cast<const char*>(out.data());
    size_t left = out.size() * sizeof(uint64_t);
    while (left) {
      ssize_t n = write(p[1], at, left);
      if (n <= 0) _exit(2);
      at += n, left -= static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(p[1]);
  std::vector<uint64_t> got;
  uint64_t v;
  while (read(p[0], &v, sizeof v) == static_cast<ssize_t>(sizeof v)) got.push_back(v);
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return got;
}

long MinorFaults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

// In a child: the faults taken writing the first kWritten pages of `mem`.
long FaultsWriting(volatile char* mem) {
  auto got = InChild([mem] {
    const long before = MinorFaults();
    for (size_t i = 0; i < kWritten; ++i) mem[i * kPage] = static_cast<char>(mem[i * kPage] + 1);
    return std::vector<uint64_t>{static_cast<uint64_t>(MinorFaults() - before)};
  });
  return got.empty() ? -1 : static_cast<long>(got[0]);
}

TEST(CopyAtClone, PagesAChildWroteAreCopiedAtEveryLaterFork) {
  void* m =
      mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* mem = static_cast<volatile char*>(m);
  for (size_t i = 0; i < kPages; ++i) mem[i * kPage] = 1;  // all present in the parent

  // A child writes the first kWritten pages and lists what it wrote.
  std::vector<uint64_t> listed = InChild([mem] {
    for (size_t i = 0; i < kWritten; ++i) mem[i * kPage] = 2;
    std::vector<uint64_t> out(1 << 16);
    long n = warren_written_pages(reinterpret_cast<uintptr_t*>(out.data()), out.size());
    out.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return out;
  });
  const auto base = reinterpret_cast<uint64_t>(m);
  for (size_t i = 0; i < kPages; ++i) {
    const bool found = std::find(listed.begin(), listed.end(), base + i * kPage) != listed.end();
    EXPECT_EQ(found, i < kWritten) << "page " << i;
  }

  const long shared = FaultsWriting(mem);
  EXPECT_GE(shared, static_cast<long>(kWritten));  // one copy-on-write fault a page

  // Pinned from the list as the child sent it, with pages the parent writes itself after each
  // fork (`own`): the next kOwn, and one the list has too (pinned once).
  std::vector<uint64_t> list{listed.size()};
  list.insert(list.end(), listed.begin(), listed.end());
  std::vector<uintptr_t> own{base + kPage};  // listed too
  for (size_t i = kWritten; i < kWritten + kOwn; ++i) own.push_back(base + i * kPage + 8);
  const char* why = "";
  const long pinned = warren_copy_at_clone_from_list(list.data(), list.size() * sizeof(uint64_t),
                                                     own.data(), own.size(), &why);
  // (The list has the child's stack and heap too: those the parent has are pinned as well.)
  ASSERT_GE(pinned, static_cast<long>(kWritten + kOwn)) << why << ": " << strerror(errno);
  EXPECT_LE(pinned, static_cast<long>(listed.size() + kOwn));
  std::vector<uintptr_t> pages(listed.begin(), listed.end());

  // The parent's own pages stay writable across a fork: no fault where a page it did not pin
  // takes one.
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  MinorFaults();  // its own stack's first write since the fork
  long before = MinorFaults();
  for (size_t i = kWritten; i < kWritten + kOwn; ++i) mem[i * kPage] = 3;
  EXPECT_EQ(MinorFaults() - before, 0);
  before = MinorFaults();
  for (size_t i = kWritten + kOwn; i < kPages; ++i) mem[i * kPage] = 3;
  EXPECT_GE(MinorFaults() - before, static_cast<long>(kPages - kWritten - kOwn));

  // Copied at the fork: the child's writes find its own pages, writable.
  EXPECT_EQ(FaultsWriting(mem), 0);
  EXPECT_EQ(FaultsWriting(mem), 0);  // at every fork, not once
  // The parent's own pages stay writable and its own: the child's copies are the child's.
  mem[0] = 42;
  EXPECT_EQ(InChild([mem] { return std::vector<uint64_t>{static_cast<uint64_t>(mem[0])}; }),
            std::vector<uint64_t>{42});

  // Once per process.
  EXPECT_EQ(warren_copy_at_clone(pages.data(), pages.size()), -1);
  EXPECT_EQ(errno, EBUSY);
}

}  // namespace
}  // namespace warren::sys
