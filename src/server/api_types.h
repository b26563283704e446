// The API's request types, parsed and validated from JSON. Unknown fields, wrong types and
// values outside the node's maxima are errors that name the field.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/display.h"
#include "base/status.h"
#include "isolation/fs_policy.h"
#include "node/terminal_size.h"
#include "runtime/backend_kind.h"

namespace warren::server {

using nlohmann::json;

struct NetworkPolicy {
  std::string mode = "none";
  std::vector<std::string> allow;
};

struct SandboxSpec {
  runtime::BackendKind backend = runtime::BackendKind::kContainer;
  std::string image;
  std::optional<std::string> workspace;
  std::vector<std::string> tools;
  double cpu = 1.0;
  uint64_t memory_mb = 512;
  uint64_t disk_mb = 1024;
  uint64_t pids = 512;
  uint64_t open_files = 4096;  // RLIMIT_NOFILE of every command (an addition to the contract)
  NetworkPolicy network;
  isolation::FsPolicy filesystem;  // read-only trees (an addition to the contract, issue 23)
  std::map<std::string, std::string> env;
  uint64_t ttl_s = 3600;
  std::optional<uint64_t> idle_timeout_s;
  std::map<std::string, std::string> labels;
  // Labels the sandbox's node must carry (node/node_selector.h; an addition to the contract).
  std::map<std::string, std::string> node_selector;
  std::optional<std::string> trajectory;
  // A recorded step re-run in a new sandbox of the trajectory gives other output: "continue"
  // replays the record all the same (reporting `diverged`), "stop" answers the re-run's own
  // result and refuses further execs (an addition to the contract, issue 24).
  std::string on_divergence = "continue";
  std::optional<std::string> lease;
  std::string on_lease_expiry = "delete";
  // A desktop sandbox: a screen of this size (the image's Xvfb), screenshots and input.
  std::optional<agent::DisplaySize> display;
};

Result<SandboxSpec> ParseSandboxSpec(const json& j);
// {"read_only": [PATH...], "writable": [PATH...]} (both optional), normalized.
Result<isolation::FsPolicy> ParseFsPolicy(const json& j);
json ToJson(const isolation::FsPolicy& p);
json ToJson(const SandboxSpec& s);

struct ExecRequest {
  std::vector<std::string> argv;  // "cmd" becomes ["/bin/sh", "-c", cmd]
  std::optional<std::string> stdin_data;
  std::map<std::string, std::string> env;
  std::string cwd = "/";
  double timeout_s = 60;
  bool wait = true;
  uint64_t max_output_bytes = 1 << 20;
  bool binary = false;
  std::optional<uint64_t> step;
  // A terminal of rows x cols (`tty`), or pipes with input taken while it runs
  // (`stdin_open`). Either makes the exec interactive: unless the request says otherwise it
  // returns at once (`wait` false), has no deadline but the sandbox's and keeps up to
  // Limits::kMaxOutputBytes of output.
  std::optional<node::TerminalSize> tty;
  bool stdin_open = false;
  // Not in the contract's JSON: variables a protocol served beside it sets unless the sandbox
  // or the request does (E2B's HOME and USER).
  std::map<std::string, std::string> env_defaults;
};

Result<ExecRequest> ParseExecRequest(const json& j);

// POST .../execs/{exec_id}/input: {"data": text} or {"data_b64": bytes}, and/or "eof": true.
struct ExecInput {
  std::string data;
  bool eof = false;
};
Result<ExecInput> ParseExecInput(const json& j);

// NAME:TAG with conservative characters. Splits into *name and *tag.
Status ParseImageRef(const std::string& ref, std::string* name, std::string* tag);
// Parses a JSON body; malformed JSON gives an invalid status with the parser's position.
Result<json> ParseJsonBody(const std::string& body);

// Node maxima for per-sandbox resources.
struct Limits {
  static constexpr uint64_t kMaxMemoryMb = 65536;
  static constexpr uint64_t kMinMemoryMb = 16;
  static constexpr uint64_t kMaxDiskMb = 262144;
  static constexpr uint64_t kMaxPids = 65536;
  static constexpr uint64_t kMaxOpenFiles = 65536;
  static constexpr double kMaxCpu = 256;
  static constexpr uint64_t kMaxOutputBytes = 64ull << 20;
  // One input request to a running exec (the agent holds at most this much unread).
  static constexpr uint64_t kMaxInputBytes = 1ull << 20;
  static constexpr double kMaxTimeoutS = 7 * 86400;
  static constexpr size_t kMaxArgvBytes = 1 << 20;
  // The sandbox's environment travels in the agent's setup message.
  static constexpr size_t kMaxSandboxEnvBytes = 32 << 10;
};

}  // namespace warren::server
