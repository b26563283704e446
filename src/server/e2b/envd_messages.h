// The messages of E2B's in-sandbox daemon (envd's process.Process and filesystem.Filesystem
// services, from the protobuf descriptors the e2b SDK ships) as typed structs, read from and
// written as proto3 JSON: camelCase names, absent fields at their defaults, unknown fields
// ignored, enums by name (or number), int64 as a string, bytes as base64.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "node/exec_record.h"
#include "node/terminal_size.h"

namespace warren::server::e2b {

struct ProcessConfig {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::optional<std::string> cwd;
};

struct StartRequest {
  ProcessConfig process;
  std::optional<node::TerminalSize> pty;
  std::optional<std::string> tag;
  bool stdin = true;  // envd: stdin is a pipe unless the request says false
};
Result<StartRequest> ParseStartRequest(const nlohmann::json& j);

// A process by pid or by tag.
struct ProcessSelector {
  uint32_t pid = 0;
  std::optional<std::string> tag;
};
Result<ProcessSelector> ParseSelector(const nlohmann::json& request);

struct InputRequest {
  ProcessSelector process;
  std::string data;  // stdin or pty bytes
};
Result<InputRequest> ParseSendInput(const nlohmann::json& j);

struct SignalRequest {
  ProcessSelector process;
  int signal = 0;  // SIGTERM or SIGKILL
};
Result<SignalRequest> ParseSendSignal(const nlohmann::json& j);

struct UpdateRequest {
  ProcessSelector process;
  std::optional<node::TerminalSize> pty;
};
Result<UpdateRequest> ParseUpdate(const nlohmann::json& j);

struct ProcessInfo {
  ProcessConfig config;
  uint32_t pid = 0;
  std::optional<std::string> tag;
};
nlohmann::json ToJson(const ProcessInfo& p);

// ProcessEvent (the `event` of Start's and Connect's responses).
nlohmann::json StartEvent(uint32_t pid);
nlohmann::json DataEvent(int stream, std::string_view bytes, bool pty);
nlohmann::json KeepaliveEvent();
// The end as envd reports it (Go's ProcessState): "exit status N", or "signal: killed".
nlohmann::json EndEvent(const node::ExecOutcome& outcome);

enum class FileType { kUnspecified, kFile, kDirectory, kSymlink };
struct EntryInfo {
  std::string name, path;
  FileType type = FileType::kUnspecified;
  int64_t size = 0;
  uint32_t mode = 0;        // permission bits (and setuid/setgid/sticky)
  std::string permissions;  // as ls -l shows them: "-rw-r--r--"
  std::string owner, group;
  double modified = 0;  // unix seconds
  std::optional<std::string> symlink_target;
};
nlohmann::json ToJson(const EntryInfo& e);

enum class FsEventType { kCreate = 1, kWrite = 2, kRemove = 3, kRename = 4, kChmod = 5 };
nlohmann::json FilesystemEvent(const std::string& name, FsEventType type);

// The `path` field of a filesystem request; invalid_argument when absent or empty.
Result<std::string> PathField(const nlohmann::json& j, const char* field = "path");

}  // namespace warren::server::e2b
