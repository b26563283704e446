// The pure parts of filesystem integrity: policy parsing and precedence, the tool guard's plan
// and the tamper report over plain directories (whiteouts and the kernel's flags are in the
// root tiers: tests/security/test_integrity.py).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "base/unique_fd.h"
#include "isolation/fs_policy.h"
#include "isolation/overlay_changes.h"
#include "isolation/tool_guard.h"
#include "server/api_types.h"

namespace warren::isolation {
namespace {

TEST(FsPolicy, RefusesRelativeUnnormalizedAndContradictoryPaths) {
  for (const char* bad : {"usr", "/usr/", "/usr//bin", "/usr/./bin", "/usr/../etc", ""})
    EXPECT_FALSE(NormalizeFsPolicy({{bad}, {}}).ok()) << bad;
  EXPECT_FALSE(NormalizeFsPolicy({{"/usr"}, {"/usr"}}).ok());
  FsPolicy many;
  for (int i = 0; i < 65; ++i) many.read_only.push_back("/d" + std::to_string(i));
  EXPECT_FALSE(NormalizeFsPolicy(many).ok());
  auto p = NormalizeFsPolicy({{"/usr", "/etc", "/usr"}, {"/"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->read_only, (std::vector<std::string>{"/etc", "/usr"}));
}

TEST(FsPolicy, TheNearestListedTreeDecides) {
  FsPolicyView v(FsPolicy{{"/", "/usr/local/lib"}, {"/work", "/usr/local"}});
  EXPECT_TRUE(v.ReadOnly("/"));
  EXPECT_TRUE(v.ReadOnly("/etc/passwd"));
  EXPECT_FALSE(v.ReadOnly("/work"));
  EXPECT_FALSE(v.ReadOnly("/work/a/b"));
  EXPECT_TRUE(v.ReadOnly("/workspace"));  // a sibling with a common prefix is not inside
  EXPECT_FALSE(v.ReadOnly("/usr/local/bin/x"));
  EXPECT_TRUE(v.ReadOnly("/usr/local/lib/x"));
  FsPolicyView none(FsPolicy{});
  EXPECT_FALSE(none.ReadOnly("/usr/bin"));
  FsPolicyView etc(FsPolicy{{"/etc"}, {}});
  EXPECT_TRUE(etc.AnyReadOnlyWithin("/"));
  EXPECT_FALSE(etc.AnyReadOnlyWithin("/usr"));
  EXPECT_TRUE(etc.AnyReadOnlyWithin("/etc/ssl"));
}

TEST(FsPolicy, TheApiParsesStrictly) {
  using server::ParseFsPolicy;
  EXPECT_TRUE(ParseFsPolicy(nlohmann::json::object()).ok());
  EXPECT_FALSE(ParseFsPolicy({{"read_only", "/usr"}}).ok());   // not a list
  EXPECT_FALSE(ParseFsPolicy({{"read_only", {1}}}).ok());      // not strings
  EXPECT_FALSE(ParseFsPolicy({{"readonly", {"/usr"}}}).ok());  // unknown key
  auto p = ParseFsPolicy({{"read_only", {"/usr"}}, {"writable", nullptr}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(server::ToJson(*p),
            (nlohmann::json{{"read_only", {"/usr"}}, {"writable", nlohmann::json::array()}}));
}

TEST(FsPolicy, AWholeMachineTakesNeitherToolsNorAPolicy) {
  using server::ParseSandboxSpec;
  const nlohmann::json tools = {{"image", "a:1"}, {"tools", {"t:1"}}};
  const nlohmann::json fs = {{"image", "a:1"}, {"filesystem", {{"read_only", {"/usr"}}}}};
  for (const char* backend : {"container", "microvm", "fncall"}) {
    nlohmann::json a = tools, b = fs;
    a["backend"] = b["backend"] = backend;
    EXPECT_TRUE(ParseSandboxSpec(a).ok()) << backend;
    EXPECT_TRUE(ParseSandboxSpec(b).ok()) << backend;
  }
  nlohmann::json a = tools, b = fs;
  a["backend"] = b["backend"] = "vm";
  auto ra = ParseSandboxSpec(a), rb = ParseSandboxSpec(b);
  ASSERT_FALSE(ra.ok());
  EXPECT_EQ(ra.status().code(), Code::kInvalid);
  EXPECT_NE(ra.status().message().find("microvm"), std::string::npos);
  EXPECT_FALSE(rb.ok());
}

class Tree {
 public:
  Tree() {
    char tmpl[] = "/tmp/warren-fsi-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~Tree() { (void)system(("rm -rf " + root_).c_str()); }
  void Dir(const std::string& p) { (void)system(("mkdir -p " + root_ + p).c_str()); }
  void File(const std::string& p, const std::string& data = "x") {
    Dir(p.substr(0, p.rfind('/')));
    std::ofstream(root_ + p) << data;
  }
  void Link(const std::string& target, const std::string& p) {
    ASSERT_EQ(symlink(target.c_str(), (root_ + p).c_str()), 0);
  }
  int fd(const std::string& sub) {
    fds_.emplace_back(open((root_ + sub).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return fds_.back().get();
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  std::vector<UniqueFd> fds_;
};

TEST(ToolGuard, GuardsToolDirsWholeAndSharedFilesOneByOne) {
  Tree t;
  t.File("/tool/opt/tools/grader/bin/grade");
  t.File("/tool/opt/tools/grader/lib/a");
  t.File("/tool/usr/bin/grade");          // beside the base's files
  t.File("/tool/usr/lib/grader-data/x");  // a directory of its own under a shared one
  t.Link("/opt/tools/grader/bin/grade", "/tool/usr/bin/grade-link");
  t.Link("/x", "/tool/toplink");  // a symlink in /: not guarded
  t.File("/base/usr/bin/sh");
  t.Dir("/base/usr/lib");
  auto plan = PlanToolGuard(t.fd("/tool"), {t.fd("/base")});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->read_only,
            (std::vector<std::string>{"/opt/tools/grader", "/usr/bin", "/usr/lib/grader-data"}));
  EXPECT_EQ(plan->pins, (std::vector<std::string>{"/opt", "/opt/tools", "/usr", "/usr/lib"}));
}

TEST(ToolGuard, MergedPlansDropPathsBelowAnotherReadOnlyOne) {
  ToolGuardPlan a{{"/opt"}, {"/opt/tools"}};
  ToolGuardPlan b{{"/opt", "/opt/tools"}, {"/opt/tools/b"}};
  auto m = MergeToolGuardPlans({a, b});
  EXPECT_EQ(m.read_only, (std::vector<std::string>{"/opt/tools"}));
  EXPECT_EQ(m.pins, (std::vector<std::string>{"/opt"}));
}

TEST(OverlayChanges, ListsAddedModifiedAndOpaqueDeletionsWithTheirLayer) {
  Tree t;
  // Layers: l0 (top, a workspace) and l1 (base).
  t.File("/l1/etc/passwd", "root");
  t.File("/l1/etc/hosts", "h");
  t.File("/l1/usr/bin/tool", "t");
  t.File("/l1/var/cache/a", "a");
  t.File("/l1/var/cache/b", "b");
  t.File("/l0/work/task", "task");
  // The upper layer: /etc/passwd changed, /root/new added, /usr/bin only copied up (same
  // mode: not a change), /var/cache replaced whole (opaque: itself modified, what the layers
  // had in it deleted, a new file added), /work/task changed.
  t.File("/upper/etc/passwd", "hacked");
  t.File("/upper/root/new", "n");
  t.Dir("/upper/usr/bin");
  t.File("/upper/var/cache/c", "c");
  t.File("/upper/work/task", "changed");
  for (const char* d :
       {"/l1/etc", "/l1/usr", "/l1/usr/bin", "/upper/etc", "/upper/usr", "/upper/usr/bin"})
    chmod((t.root() + d).c_str(), 0755);
  if (setxattr((t.root() + "/upper/var/cache").c_str(), "user.overlay.opaque", "y", 1, 0) != 0)
    GTEST_FAIL() << "user xattrs are needed on /tmp for this test: " << strerror(errno);
  t.Dir("/shm");
  t.File("/shm/hidden", "s");
  auto r = ReadChanges(t.fd("/upper"), t.fd("/shm"), {t.fd("/l0"), t.fd("/l1")}, "/", 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> got;
  for (const auto& c : r->changes)
    got.push_back(std::string(ChangeKindName(c.kind)) + " " + c.path + " " +
                  std::to_string(c.layer));
  EXPECT_EQ(got, (std::vector<std::string>{
                     "added /dev/shm/hidden -1", "modified /etc/passwd 1", "added /root -1",
                     "added /root/new -1", "modified /var/cache 1", "deleted /var/cache/a 1",
                     "deleted /var/cache/b 1", "added /var/cache/c -1", "modified /work/task 0"}));
  EXPECT_FALSE(r->truncated);

  auto etc = ReadChanges(t.fd("/upper"), t.fd("/shm"), {t.fd("/l0"), t.fd("/l1")}, "/etc", 100);
  ASSERT_TRUE(etc.ok());
  ASSERT_EQ(etc->changes.size(), 1u);
  EXPECT_EQ(etc->changes[0].path, "/etc/passwd");

  auto two = ReadChanges(t.fd("/upper"), -1, {t.fd("/l0"), t.fd("/l1")}, "/", 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->changes.size(), 2u);
  EXPECT_TRUE(two->truncated);
}

}  // namespace
}  // namespace warren::isolation
