// Root integration tests of the container backend through LocalNode: real namespaces,
// EROFS, overlayfs, cgroups and the real warren-agent.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "base/ids.h"
#include "image/layer_store.h"
#include "isolation/capabilities.h"
#include "isolation/cgroup.h"
#include "node/local_node.h"
#include "runtime/create_faults.h"
#include "test_env.h"

namespace warren {
namespace {

// The comm of a sandbox's agent: the name of the node's file of it (agent_binary.h), which
// as root is on a tmpfs of its own.
std::string AgentComm() { return "warren-agent"; }

class ContainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests need root (CI runs them as root)";
    // Sandboxes left by an earlier run of these tests that crashed would hold our uid range.
    isolation::ReapStaleCgroups("warren-test");
    dir_ = testing::MakeScratchDir("container");
    store_ = std::make_unique<image::LayerStore>(dir_ + "/store");
    ASSERT_TRUE(store_->Init().ok());
    std::string root = dir_ + "/rootfs";
    testing::MakeBusyboxRoot(root);
    testing::TarDir(root, dir_ + "/rootfs.tar");
    auto blob = store_->ImportTar(dir_ + "/rootfs.tar");
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    digest_ = blob->digest;
    node::LocalNodeOptions opts;
    opts.agent_path = WARREN_AGENT_PATH;
    opts.cgroup_parent = "warren-test";
    opts.warm_pool = warm_pool_;  // none, unless a test is about it: leak checks count uid slots
    opts.create_faults = faults_;
    // These tests are about containers; a microVM backend starting on its own thread would open
    // and close fds while a leak check counts them.
    opts.microvm = false;
    auto n = node::LocalNode::Start(opts, store_.get());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node_ = std::move(n).value();
  }
  void TearDown() override {
    node_.reset();
    // The node removes its cgroup parent when it goes: nothing of the tests stays behind.
    EXPECT_EQ(testing::CountCgroupDirs("warren-test"), 0);
    store_.reset();
    testing::RemoveDir(dir_);
  }

  node::NodeSandboxSpec Spec(uint64_t memory = 256ull << 20) {
    node::NodeSandboxSpec s;
    s.config.id = NewSandboxId();
    s.config.hostname = s.config.id;
    s.config.layers = {{digest_, ""}};
    s.config.memory_bytes = memory;
    s.config.disk_bytes = 64ull << 20;
    return s;
  }

  std::shared_ptr<node::ExecRecord> Run(const std::string& id, std::vector<std::string> argv,
                                        int64_t timeout_ms = 20000) {
    node::ExecSpec es;
    es.argv = std::move(argv);
    es.timeout_ms = timeout_ms;
    auto rec = node_->StartExec(id, NewExecId(), es);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    if (!rec.ok()) return nullptr;
    EXPECT_TRUE((*rec)->WaitDone(30000));
    return *rec;
  }

  size_t warm_pool_ = 0;
  runtime::CreateFaults* faults_ = nullptr;
  std::string dir_, digest_;
  std::unique_ptr<image::LayerStore> store_;
  std::unique_ptr<node::LocalNode> node_;
};

TEST_F(ContainerTest, ExecSeesIsolatedWorldAndDeleteLeavesNothing) {
  auto spec = Spec();
  auto rt = node_->CreateSandbox(spec);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  const std::string id = spec.config.id;
  EXPECT_GE(rt->host_uid, 1u << 20);

  auto rec = Run(id, {"sh", "-c", "echo hi; id -u; hostname; ls /sys/class/net; exit 3"});
  ASSERT_TRUE(rec);
  auto j = rec->ResultJson();
  EXPECT_EQ(j["exit_code"], 3) << j.dump();
  EXPECT_EQ(j["stdout"], "hi\n0\n" + id + "\nlo\n") << j.dump();

  // Only the sandbox's own processes are visible: the agent (1) and the command itself.
  // (The agent runs from the node's file of it, hence the comm: see agent_binary.h.)
  rec = Run(id, {"sh", "-c", "set -- /proc/[0-9]*; echo $#; cat /proc/1/comm"});
  EXPECT_EQ(rec->ResultJson()["stdout"], "2\n" + AgentComm() + "\n") << rec->ResultJson().dump();
  // The host sees the sandbox's processes under the sandbox's unprivileged uid.
  EXPECT_GE(testing::CountProcessesOfUid(rt->host_uid), 1);
  EXPECT_GE(testing::CountCgroupDirs(id), 1);

  ASSERT_TRUE(node_->DeleteSandbox(id).ok());
  EXPECT_EQ(testing::CountProcessesOfUid(rt->host_uid), 0);
  EXPECT_EQ(testing::CountCgroupDirs(id), 0);
  EXPECT_EQ(testing::CountMountinfo(id), 0);
  EXPECT_EQ(testing::CountMountinfo("/run/warren"), 0);
}

TEST_F(ContainerTest, StdinEnvCwdTimeout) {
  auto spec = Spec();
  ASSERT_TRUE(node_->CreateSandbox(spec).ok());
  const std::string id = spec.config.id;
  node::ExecSpec es;
  es.argv = {"sh", "-c", "pwd; echo $FOO; cat"};
  es.env = {{"FOO", "bar"}};
  es.cwd = "/tmp";
  es.has_stdin = true;
  es.stdin_data = std::string(200000, 'x');  // several stdin messages
  auto rec = node_->StartExec(id, NewExecId(), es);
  ASSERT_TRUE(rec.ok());
  ASSERT_TRUE((*rec)->WaitDone(30000));
  auto j = (*rec)->ResultJson();
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_TRUE(j["stdout"] == "/tmp\nbar\n" + std::string(200000, 'x'))
      << j["stdout"].get<std::string>().substr(0, 100);

  auto t = Run(id, {"sleep", "30"}, 300);
  auto tj = t->ResultJson();
  EXPECT_EQ(tj["timed_out"], true);
  EXPECT_EQ(tj["exit_code"], 124);

  auto nf = Run(id, {"/no/such/program"});
  EXPECT_EQ(nf->ResultJson()["exit_code"], 127);
  // The child's verdict comes back through the memory it shares with the agent.
  EXPECT_NE(nf->ResultJson()["stderr"].get<std::string>().find("warren: exec `/no/such/program`"),
            std::string::npos)
      << nf->ResultJson().dump();
  node::ExecSpec bad_cwd;
  bad_cwd.argv = {"true"};
  bad_cwd.cwd = "/no/such/dir";
  auto bc = node_->StartExec(id, NewExecId(), bad_cwd);
  ASSERT_TRUE(bc.ok()) << bc.status().ToString();
  ASSERT_TRUE((*bc)->WaitDone(30000));
  EXPECT_NE((*bc)->ResultJson().value("error", "").find("chdir `/no/such/dir`"), std::string::npos)
      << (*bc)->ResultJson().dump();
  ASSERT_TRUE(node_->DeleteSandbox(id).ok());
}

// A command holds only the kept capabilities, in its bounding set too, and no signal ignored
// (the agent ignores SIGPIPE); the agent narrowed its own bounding set once, at the seal.
TEST_F(ContainerTest, CommandsAndTheAgentHoldOnlyTheKeptBoundingSet) {
  auto spec = Spec();
  const std::string id = spec.config.id;
  ASSERT_TRUE(node_->CreateSandbox(spec).ok());
  char kept[32];
  snprintf(kept, sizeof kept, "%016llx",
           static_cast<unsigned long long>(isolation::KeptCapabilities()));
  auto own = Run(id, {"grep", "-E", "^(CapBnd|CapEff|SigIgn):", "/proc/self/status"});
  const std::string out = own->ResultJson()["stdout"];
  EXPECT_NE(out.find(std::string("CapBnd:\t") + kept), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("CapEff:\t") + kept), std::string::npos) << out;
  EXPECT_NE(out.find("SigIgn:\t0000000000000000"), std::string::npos) << out;
  auto agent = Run(id, {"grep", "^CapBnd:", "/proc/1/status"});
  EXPECT_EQ(agent->ResultJson()["stdout"], std::string("CapBnd:\t") + kept + "\n")
      << agent->ResultJson().dump();
  ASSERT_TRUE(node_->DeleteSandbox(id).ok());
}

TEST_F(ContainerTest, OutputIsCappedOnTheHost) {
  auto spec = Spec();
  ASSERT_TRUE(node_->CreateSandbox(spec).ok());
  node::ExecSpec es;
  es.argv = {"sh", "-c", "head -c 5000000 /dev/zero; echo done >&2"};
  es.max_output = 1000;
  auto rec = node_->StartExec(spec.config.id, NewExecId(), es);
  ASSERT_TRUE(rec.ok());
  ASSERT_TRUE((*rec)->WaitDone(30000));
  auto j = (*rec)->ResultJson();
  EXPECT_EQ(j["stdout"].get<std::string>().size(), 1000u);
  EXPECT_EQ(j["stdout_truncated"], true);
  EXPECT_EQ(j["stderr"], "done\n");
  ASSERT_TRUE(node_->DeleteSandbox(spec.config.id).ok());
}

TEST_F(ContainerTest, MemoryLimitKillsTheHogNotTheSandbox) {
  auto spec = Spec(64ull << 20);
  ASSERT_TRUE(node_->CreateSandbox(spec).ok());
  auto rec = Run(spec.config.id,
                 {"sh", "-c", "x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo survived"});
  auto j = rec->ResultJson();
  EXPECT_EQ(j["exit_code"], 137) << j.dump();
  // The sandbox itself is still usable.
  auto ok = Run(spec.config.id, {"echo", "alive"});
  EXPECT_EQ(ok->ResultJson()["stdout"], "alive\n");
  ASSERT_TRUE(node_->DeleteSandbox(spec.config.id).ok());
}

TEST_F(ContainerTest, FilesRoundTripThroughTheAgent) {
  auto spec = Spec();
  ASSERT_TRUE(node_->CreateSandbox(spec).ok());
  const std::string id = spec.config.id;
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(node_->WriteFile(id, "/tmp/blob", 0600, data).ok());
  auto back = node_->ReadFile(id, "/tmp/blob", 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  auto mode = Run(id, {"stat", "-c", "%a %u", "/tmp/blob"});
  EXPECT_EQ(mode->ResultJson()["stdout"], "600 0\n");
  auto missing = node_->ReadFile(id, "/nope", 100);
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  auto dev = node_->ReadFile(id, "/dev/zero", 100);  // not a regular file: refused, no hang
  EXPECT_FALSE(dev.ok());
  ASSERT_TRUE(node_->DeleteSandbox(id).ok());
}

TEST_F(ContainerTest, FailedCreateUnwindsCompletely) {
  // A blob that is not an EROFS image: the mount fails after the uid slot was taken.
  std::string bogus = dir_ + "/bogus";
  FILE* f = fopen(bogus.c_str(), "w");
  fputs("not erofs", f);
  fclose(f);
  auto blob = store_->ImportErofs(bogus);
  EXPECT_FALSE(blob.ok());

  // A layer digest that does not exist.
  auto spec = Spec();
  spec.config.layers = {{"sha256:" + std::string(64, 'a'), ""}};
  EXPECT_FALSE(node_->CreateSandbox(spec).ok());
  EXPECT_EQ(testing::CountCgroupDirs(spec.config.id), 0);

  // A hostname the kernel refuses makes the agent's setup fail after clone, with mounts,
  // cgroups and the uid range in place: everything unwinds.
  auto spec2 = Spec();
  spec2.config.hostname = std::string(100, 'h');
  auto r = node_->CreateSandbox(spec2);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(testing::CountCgroupDirs(spec2.config.id), 0);
  EXPECT_EQ(node_->live_sandboxes(), 0u);
  EXPECT_EQ(node_->Info()["uid_slots_used"], 0);
}

// Failure injection: each step of a create fails in turn (runtime/create_faults.h), as if it
// had failed itself, and the failed create must leave nothing: no cgroup, mount, fd, uid slot,
// layer mount, network attachment or run file.
class FailAt : public runtime::CreateFaults {
 public:
  Status Before(runtime::CreateStep step, const std::string& id) override {
    reached.push_back(step);
    if (step != fail) return Status::Ok();
    return Internal("injected", id,
                    std::string("failure before step ") + runtime::CreateStepName(step));
  }
  runtime::CreateStep fail = runtime::CreateStep::kIdentity;
  std::vector<runtime::CreateStep> reached;
};

class CreateFaultTest : public ContainerTest {
 protected:
  CreateFaultTest() { faults_ = &fail_at_; }
  FailAt fail_at_;
};

size_t CountLines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

size_t CountEntries(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

TEST_F(CreateFaultTest, EachStepFailingLeavesNothingBehind) {
  // One good create first: the layer stays mounted in the cache only while used, the network
  // pool and agent mux have their threads and fds already, so what is counted next is steady.
  auto warm = Spec();
  fail_at_.fail = static_cast<runtime::CreateStep>(-1);
  ASSERT_TRUE(node_->CreateSandbox(warm).ok());
  ASSERT_TRUE(node_->DeleteSandbox(warm.config.id).ok());
  // Every step a create of this node goes through (network ones only with networking).
  const std::vector<runtime::CreateStep> steps = fail_at_.reached;
  ASSERT_GE(steps.size(), 9u) << "the container backend's steps are not all seamed";
  const bool networked = std::count(steps.begin(), steps.end(), runtime::CreateStep::kNetwork) > 0;
  EXPECT_EQ(networked, node_->Info()["network"].contains("bridge"))
      << node_->Info()["network"].dump();

  // The network keeps a pool of namespaces (each with its fds), refilled on a thread of its
  // own after a create takes one: fds are counted once it is full again.
  auto pool_full = [&] {
    for (int i = 0; i < 200; ++i) {
      const auto pool = node_->Info()["network"].value("pool", nlohmann::json::object());
      if (pool.value("bare", 0) >= pool.value("bare_target", 0) &&
          pool.value("wired", 0) >= pool.value("wired_target", 0))
        return true;
      usleep(50 * 1000);
    }
    return false;
  };
  ASSERT_TRUE(pool_full());
  // Each bare namespace waiting in the pool holds two fds (it and its sysfs); the pool may hold
  // more than its target (namespaces given back by deleted sandboxes), and a failed create
  // takes one and drops it.
  auto pooled_fds = [&] { return 2 * node_->Info()["network"]["pool"].value("bare", size_t{0}); };
  const size_t mounts = CountLines("/proc/self/mountinfo"),
               fds = CountEntries("/proc/self/fd") - pooled_fds();
  const size_t run_files = CountEntries("/run/warren/warren-test");
  for (runtime::CreateStep step : steps) {
    SCOPED_TRACE(runtime::CreateStepName(step));
    fail_at_.fail = step;
    fail_at_.reached.clear();
    auto spec = Spec();
    auto r = node_->CreateSandbox(spec);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(
        r.status().ToString().find(std::string("before step ") + runtime::CreateStepName(step)),
        std::string::npos)
        << r.status().ToString();
    EXPECT_EQ(fail_at_.reached.back(), step);
    EXPECT_EQ(testing::CountCgroupDirs(spec.config.id), 0);
    EXPECT_EQ(node_->live_sandboxes(), 0u);
    const auto info = node_->Info();
    EXPECT_EQ(info["uid_slots_used"], 0);
    EXPECT_EQ(info["layer_mounts"], 0);
    if (networked) {
      EXPECT_EQ(info["network"]["sandboxes"], 0) << info["network"].dump();
      EXPECT_EQ(info["network"]["wired"], 0) << info["network"].dump();
    }
    EXPECT_EQ(CountLines("/proc/self/mountinfo"), mounts);
    ASSERT_TRUE(pool_full());
    EXPECT_EQ(CountEntries("/proc/self/fd") - pooled_fds(), fds);
    EXPECT_EQ(CountEntries("/run/warren/warren-test"), run_files);
  }
  // And after all that, a create works.
  fail_at_.fail = static_cast<runtime::CreateStep>(-1);
  auto spec = Spec();
  ASSERT_TRUE(node_->CreateSandbox(spec).ok());
  auto rec = Run(spec.config.id, {"/bin/echo", "ok"});
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->RawOutput(1), "ok\n");
  ASSERT_TRUE(node_->DeleteSandbox(spec.config.id).ok());
}

class WarmPoolTest : public ContainerTest {
 protected:
  WarmPoolTest() { warm_pool_ = 2; }
  // One line of a cgroup file of the sandbox whose init is `pid` (its memory cgroup on a
  // hybrid host, its only one on a pure v2 host).
  static std::string CgroupFile(int pid, const std::string& controller, const std::string& file) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
    std::string line, path;
    const bool v1 = access(("/sys/fs/cgroup/" + controller).c_str(), F_OK) == 0;
    while (std::getline(in, line)) {
      if (v1 && line.find(":" + controller + ":") != std::string::npos)
        path = "/sys/fs/cgroup/" + controller + line.substr(line.rfind(':') + 1);
      if (!v1 && line.rfind("0::", 0) == 0) path = "/sys/fs/cgroup" + line.substr(3);
    }
    std::ifstream f(path + "/" + file);
    std::string v;
    std::getline(f, v);
    return v;
  }
};

TEST_F(WarmPoolTest, CreateTakesAReadySandboxThatBecomesItsOwn) {
  auto first = Spec();
  auto first_rt = node_->CreateSandbox(first);  // the template's first create starts its pool
  ASSERT_TRUE(first_rt.ok());
  for (int i = 0; i < 500 && node_->Info()["warm_pool"]["ready"] != 2; ++i) usleep(20000);
  ASSERT_EQ(node_->Info()["warm_pool"]["ready"], 2);

  // Waiting, they set up and idle at the background priority: any normal task preempts them.
  auto agents = testing::ChildrenNamed(getpid(), AgentComm());
  std::erase(agents, first_rt->host_pid);
  ASSERT_EQ(agents.size(), 2u);
  for (int pid : agents) {
    EXPECT_EQ(sched_getscheduler(pid), SCHED_IDLE) << pid;
    errno = 0;
    EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(pid)), 19) << pid;
  }

  // Other limits, environment and hostname than the pool's sandboxes were made with.
  auto spec = Spec(128ull << 20);
  spec.config.pids = 77;
  spec.config.env = {{"FOO", "bar"}};
  auto rt = node_->CreateSandbox(spec);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  EXPECT_EQ(node_->Info()["warm_pool"]["hits"], 1);
  EXPECT_EQ(node_->Info()["warm_pool"]["claim_failures"], 0);
  const std::string id = spec.config.id;
  auto rec = Run(id, {"sh", "-c", "hostname; echo $FOO; cat /proc/self/cgroup >/dev/null"});
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->ResultJson()["stdout"], id + "\nbar\n") << rec->ResultJson().dump();
  // Claimed, the agent and its commands are back at the normal policy and nice 0 (fields 19
  // and 41 of the command's own /proc/self/stat).
  EXPECT_EQ(sched_getscheduler(rt->host_pid), SCHED_OTHER);
  errno = 0;
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(rt->host_pid)), 0);
  auto sched = Run(id, {"sh", "-c", "cut -d')' -f2 /proc/self/stat | cut -d' ' -f18,40"});
  ASSERT_TRUE(sched);
  EXPECT_EQ(sched->ResultJson()["stdout"], "0 0\n") << sched->ResultJson().dump();
  EXPECT_EQ(CgroupFile(rt->host_pid, "pids", "pids.max"), "77");
  const bool v1 = access("/sys/fs/cgroup/memory", F_OK) == 0;
  EXPECT_EQ(
      CgroupFile(rt->host_pid, "memory", v1 ? "memory.limit_in_bytes" : "memory.max"),
      std::to_string(v1 ? (128ull + 32) << 20 : 128ull << 20));  // v1: the agent's headroom on top
  // What a restarted node finds it by is under its new name.
  EXPECT_EQ(access(("/run/warren/warren-test/" + id + ".sock").c_str(), F_OK), 0);
  EXPECT_EQ(access(("/run/warren/warren-test/" + id + ".json").c_str(), F_OK), 0);

  ASSERT_TRUE(node_->DeleteSandbox(id).ok());
  ASSERT_TRUE(node_->DeleteSandbox(first.config.id).ok());
  EXPECT_EQ(testing::CountProcessesOfUid(rt->host_uid), 0);
  // The pool refills; TearDown checks that its sandboxes go with the node.
}

TEST_F(ContainerTest, ManySandboxesInParallel) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        auto spec = Spec();
        if (!node_->CreateSandbox(spec).ok()) continue;
        auto rec = Run(spec.config.id, {"sh", "-c", "echo $((6*7))"});
        if (rec && rec->ResultJson()["stdout"] == "42\n") ++ok;
        (void)node_->DeleteSandbox(spec.config.id);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 20);
  EXPECT_EQ(node_->live_sandboxes(), 0u);
}

}  // namespace
}  // namespace warren
