#include "agent/call_artifacts.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace warren::agent {
namespace {

class CallArtifactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/call-artifacts-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    path_ = tmpl;
    dir_ = open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir_, 0);
  }
  void TearDown() override {
    close(dir_);
    std::system(("rm -rf " + path_).c_str());
  }
  void Write(const std::string& name, const std::string& data, mode_t mode = 0644) {
    const int fd = openat(dir_, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    fchmod(fd, mode);
    close(fd);
  }
  std::vector<std::string> Open(std::vector<std::string> collect) {
    std::vector<char*> ptrs;
    for (auto& c : collect) ptrs.push_back(c.data());
    n_ = OpenArtifacts(dir_, ptrs.data(), ptrs.size(), found_, names_, sizeof names_);
    std::vector<std::string> out;
    for (size_t i = 0; i < n_; ++i) out.push_back(found_[i].name);
    return out;
  }

  std::string path_;
  int dir_ = -1;
  Artifact found_[kMaxArtifacts];
  size_t n_ = 0;
  char names_[4096];
};

TEST_F(CallArtifactsTest, ANameOrEveryMatchOfAPatternInNameOrder) {
  Write("main", "ELF", 0755);
  Write("B.class", "b");
  Write("A.class", "a");
  Write("Main.java", "src");
  Write("x.classy", "no");
  EXPECT_EQ(Open({"main", "*.class"}), (std::vector<std::string>{"main", "A.class", "B.class"}));
  EXPECT_EQ(found_[0].len, 3u);
  EXPECT_EQ(found_[0].mode, 0755u);
  EXPECT_EQ(found_[1].mode, 0644u);
  const int fd = ReopenArtifact(found_[1]);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(read(fd, &c, 1), 1);
  EXPECT_EQ(c, 'a');
  close(fd);
  Write("A.class", "grown");  // no longer the file it found
  EXPECT_EQ(ReopenArtifact(found_[1]), -1);
}

TEST_F(CallArtifactsTest, NoFdStaysOpenSoALongListIsNotCutByTheFdLimit) {
  for (int i = 0; i < 300; ++i) Write("C" + std::to_string(1000 + i) + ".class", "x");
  const int before = open("/dev/null", O_RDONLY | O_CLOEXEC);
  close(before);
  EXPECT_EQ(Open({"*.class"}).size(), 300u);
  const int after = open("/dev/null", O_RDONLY | O_CLOEXEC);
  close(after);
  EXPECT_EQ(after, before);  // the lowest free fd is where it was
}

TEST_F(CallArtifactsTest, OnlyRegularFilesNoLinksNoFifosNoPathsAndNothingMissing) {
  Write("real", "r");
  ASSERT_EQ(symlinkat("/etc/passwd", dir_, "link"), 0);
  ASSERT_EQ(mkfifoat(dir_, "fifo", 0644), 0);
  ASSERT_EQ(mkdirat(dir_, "sub", 0755), 0);
  EXPECT_EQ(Open({"link", "fifo", "sub", "../etc/passwd", "", "absent", "real"}),
            (std::vector<std::string>{"real"}));
}

TEST_F(CallArtifactsTest, NotPastTheLimitAltogether) {
  Write("a", std::string(kArtifactLimit / 2 + 1, 'a'));
  Write("b", std::string(kArtifactLimit / 2 + 1, 'b'));
  Write("c", "small");
  EXPECT_EQ(Open({"a", "b", "c"}), (std::vector<std::string>{"a", "c"}));
}

}  // namespace
}  // namespace warren::agent
