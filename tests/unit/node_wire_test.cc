// The node's wire types: round trips, and what must not travel or parse.
#include "node/node_wire.h"

#include <gtest/gtest.h>

namespace warren::node {
namespace {

using nlohmann::json;

const std::string kDigest = "sha256:" + std::string(64, 'a');

NodeSandboxSpec Spec() {
  NodeSandboxSpec s;
  s.backend = runtime::BackendKind::kMicrovm;
  s.config.id = "sb-1";
  s.config.hostname = "sb-1";
  s.config.layers = {{kDigest, "/var/lib/warren/blobs/x", true}};
  s.config.memory_bytes = 256 << 20;
  s.config.cpus = 0.5;
  s.config.env = {{"A", "b"}};
  s.config.netns_fd = 7;  // node-local: never sent
  s.network = *net::ParsePolicy("egress", {"pypi.org", "10.0.0.0/8:443/tcp"});
  return s;
}

TEST(NodeWire, SandboxSpecRoundTripsWithoutNodeLocalFields) {
  json wire = ToWire(Spec());
  EXPECT_FALSE(wire.dump().find("/var/lib") != std::string::npos) << "a host path travelled";
  auto back = ParseWireSandboxSpec(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->backend, runtime::BackendKind::kMicrovm);
  EXPECT_EQ(back->config.layers.size(), 1u);
  EXPECT_EQ(back->config.layers[0].digest, kDigest);
  EXPECT_TRUE(back->config.layers[0].tool);
  EXPECT_TRUE(back->config.layers[0].blob_path.empty());
  EXPECT_EQ(back->config.netns_fd, -1);
  EXPECT_EQ(back->config.memory_bytes, 256u << 20);
  EXPECT_EQ(back->config.cpus, 0.5);
  EXPECT_EQ(back->config.env, Spec().config.env);
  EXPECT_TRUE(back->network.egress);
  EXPECT_EQ(back->network.Texts(), Spec().network.Texts());
}

TEST(NodeWire, SandboxSpecRefusesWhatANodeMustNotBeTold) {
  json wire = ToWire(Spec());
  json with_path = wire;
  with_path["layers"][0]["blob_path"] = "/etc/shadow";
  EXPECT_EQ(ParseWireSandboxSpec(with_path).status().code(), Code::kInvalid);
  json with_fd = wire;
  with_fd["netns_fd"] = 3;
  EXPECT_FALSE(ParseWireSandboxSpec(with_fd).ok());
  json bad_digest = wire;
  bad_digest["layers"][0]["digest"] = "../../blob";
  EXPECT_FALSE(ParseWireSandboxSpec(bad_digest).ok());
  json bad_fork = wire;
  bad_fork["fork"] = "../x";
  EXPECT_FALSE(ParseWireSandboxSpec(bad_fork).ok());
  json missing = wire;
  missing.erase("memory_bytes");
  auto st = ParseWireSandboxSpec(missing).status();
  EXPECT_NE(st.message().find("memory_bytes"), std::string::npos) << st.ToString();
  json bad_net = wire;
  bad_net["network"]["allow"] = {"not a rule!"};
  EXPECT_FALSE(ParseWireSandboxSpec(bad_net).ok());
}

TEST(NodeWire, ExecSpecCarriesBinaryStdinNotHooks) {
  ExecSpec e;
  e.argv = {"cat"};
  e.has_stdin = true;
  e.stdin_data = std::string("\0\xff\x01", 3);
  e.timeout_ms = 1500;
  e.binary = true;
  e.on_record = [](const std::shared_ptr<ExecRecord>&) {};
  auto back = ParseWireExecSpec(ToWire(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->stdin_data, e.stdin_data);
  EXPECT_TRUE(back->has_stdin);
  EXPECT_EQ(back->timeout_ms, 1500);
  EXPECT_FALSE(back->on_record);
  EXPECT_FALSE(back->channel);
  ExecSpec no_stdin;
  no_stdin.argv = {"true"};
  EXPECT_FALSE(ParseWireExecSpec(ToWire(no_stdin))->has_stdin);
  json channel = ToWire(no_stdin);
  channel["channel"] = true;  // node-internal commands cannot be asked for
  EXPECT_FALSE(ParseWireExecSpec(channel).ok());
}

TEST(NodeWire, ExecSpecCarriesItsTerminalAndOpenStdin) {
  ExecSpec e;
  e.argv = {"sh"};
  e.tty = TerminalSize{50, 132};
  e.stdin_open = true;
  auto back = ParseWireExecSpec(ToWire(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->tty.has_value());
  EXPECT_EQ(back->tty->rows, 50);
  EXPECT_EQ(back->tty->cols, 132);
  EXPECT_TRUE(back->stdin_open);
  ExecSpec plain;
  plain.argv = {"true"};
  EXPECT_FALSE(ParseWireExecSpec(ToWire(plain))->tty.has_value());
  json bad = ToWire(e);
  bad["tty"]["rows"] = 0;
  EXPECT_FALSE(ParseWireExecSpec(bad).ok());
  EXPECT_FALSE(ParseWireTerminalSize({{"rows", 10}}).ok());
  EXPECT_FALSE(ParseWireTerminalSize({{"rows", 10}, {"cols", 10}, {"x", 1}}).ok());
  EXPECT_TRUE(ParseWireTerminalSize({{"rows", 1000}, {"cols", 1}}).ok());
}

TEST(NodeWire, ExecHistoryRoundTripsAndRefusesStrangers) {
  ExecSummary done{"ex-1", {"sh", "-c", "exit 3"}, 1765000000.5, false, 3, "", false, 12, 40};
  ExecSummary killed{"ex-2",    {"sleep", "9"}, 1765000001.0, false, std::nullopt,
                     "SIGKILL", true,           900,          0};
  ExecSummary running{"ex-3", {"yes"}, 1765000002.0, true, std::nullopt, "", false, 5, 4096};
  auto back = ParseWireExecHistory(ToWire(std::vector<ExecSummary>{done, killed, running}));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].argv, done.argv);
  EXPECT_EQ((*back)[0].exit_code, 3);
  EXPECT_DOUBLE_EQ((*back)[0].started_unix, done.started_unix);
  EXPECT_EQ((*back)[1].signal, "SIGKILL");
  EXPECT_FALSE((*back)[1].exit_code.has_value());
  EXPECT_TRUE((*back)[1].timed_out);
  EXPECT_TRUE((*back)[2].running);
  EXPECT_EQ((*back)[2].output_bytes, 4096u);
  json bad = ToWire(std::vector<ExecSummary>{done});
  bad["execs"][0]["host_path"] = "/var/lib/warren";
  EXPECT_EQ(ParseWireExecHistory(bad).status().code(), Code::kInvalid);
  EXPECT_EQ(ParseWireExecHistory(json{{"execs", 3}}).status().code(), Code::kInvalid);
}

TEST(NodeWire, ChangesAndPoliciesRoundTrip) {
  isolation::ChangeReport r;
  r.truncated = true;
  r.changes.push_back({std::string("/tmp/\xff\xfe", 7), isolation::ChangeKind::kModified,
                       isolation::EntryType::kSymlink, 2, 10, 0777});
  auto back = ParseWireChanges(ToWire(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->changes.size(), 1u);
  EXPECT_EQ(back->changes[0].path, r.changes[0].path);
  EXPECT_EQ(back->changes[0].kind, isolation::ChangeKind::kModified);
  EXPECT_EQ(back->changes[0].type, isolation::EntryType::kSymlink);
  EXPECT_EQ(back->changes[0].layer, 2);
  EXPECT_TRUE(back->truncated);

  isolation::FsPolicy p{{"/opt/grader"}, {"/opt/grader/tmp"}};
  auto fs = ParseWireFsPolicy(ToWire(p));
  ASSERT_TRUE(fs.ok());
  EXPECT_EQ(*fs, p);
  EXPECT_FALSE(
      ParseWireFsPolicy(json{{"read_only", {"relative"}}, {"writable", json::array()}}).ok());

  auto rt = ParseWireRuntime(ToWire(SandboxRuntime{1234, 100000}));
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ(rt->host_pid, 1234);
  EXPECT_EQ(rt->host_uid, 100000u);
}

TEST(NodeWire, AMemoryForkAndItsChildRoundTrip) {
  NodeSandboxSpec child = Spec();
  child.fork = std::string(32, 'e');
  auto back = ParseWireSandboxSpec(ToWire(child));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->fork, child.fork);
  EXPECT_TRUE(ParseWireSandboxSpec(ToWire(Spec()))->fork.empty());
  MemoryFork m{std::string(32, 'f'), 123 << 20, 550, 830};
  auto f = ParseWireMemoryFork(ToWire(m));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->token, m.token);
  EXPECT_EQ(f->ram_bytes, m.ram_bytes);
  EXPECT_EQ(f->capture_ms, 830);
  json j = ToWire(m);
  j["token"] = "short";
  EXPECT_FALSE(ParseWireMemoryFork(j).ok());
}

TEST(NodeWire, SnapshotsRoundTripAndADigestIsChecked) {
  SnapshotSpec spec;
  spec.workspace = "sha256:" + std::string(64, 'd');
  spec.max_bytes = 5 << 20;
  auto back = ParseWireSnapshotSpec(ToWire(spec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->workspace, spec.workspace);
  EXPECT_EQ(back->max_bytes, 5u << 20);
  nlohmann::json extra = ToWire(spec);
  extra["path"] = "/etc";
  EXPECT_FALSE(ParseWireSnapshotSpec(extra).ok());
  nlohmann::json path_as_digest = ToWire(spec);
  path_as_digest["workspace"] = "../../blobs/x";
  EXPECT_FALSE(ParseWireSnapshotSpec(path_as_digest).ok());

  SnapshotLayer layer{"sha256:" + std::string(64, 'c'), 4096, 7, 100, 2};
  auto l = ParseWireSnapshotLayer(ToWire(layer));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->digest, layer.digest);
  EXPECT_EQ(l->whiteouts, 2u);
  for (const char* d : {"sha256:../../etc", "md5:abc", ""}) {
    nlohmann::json j = ToWire(layer);
    j["digest"] = d;
    EXPECT_FALSE(ParseWireSnapshotLayer(j).ok()) << d;
  }
}

}  // namespace
}  // namespace warren::node
