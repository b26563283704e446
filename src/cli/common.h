// Shared pieces of the CLI: where the server is, the token, error lines, spec flags, and the
// exec-and-stream loop used by `exec` and `run`.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "client/http_client.h"

namespace warren::cli {

// The process exit code chosen by a subcommand's callback.
int& ExitCode();
// Everything after the first `--` on the command line: main() takes it off before CLI11
// parses the rest, so the command's own options can never be mistaken for ours.
std::vector<std::string>& CommandAfterDashes();

// `warren: <what failed>: <why>` on stderr; returns 1.
int Fail(const Status& st);
int Fail(const std::string& what, const std::string& why);

std::string ServerUrl();
std::string Token();
client::HttpClient& Client();

struct SpecFlags {
  std::string backend = "container", image, workspace, network = "none";
  std::string lease, trajectory, on_lease_expiry;
  uint64_t idle_timeout = 0;
  std::vector<std::string> tools, allow, labels, node_selector, env, read_only, writable;
  double cpu = 0;
  std::string memory, disk;
  std::string display;  // WIDTHxHEIGHT: a desktop sandbox
  uint64_t pids = 0, ttl = 0;
};
// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(const std::string& s);
// "512M"/"1G" (or a bare number of MiB) in MiB; the error names `flag`.
Result<uint64_t> SizeMb(const std::string& s, const char* flag);
// Makes a vector option take one value per occurrence (--env A=1 --env B=2).
CLI::Option* Repeatable(CLI::Option* opt);
void AddSpecFlags(CLI::App* cmd, SpecFlags* f);
Result<nlohmann::json> SpecJson(const SpecFlags& f);
// Creates a sandbox from the flags; returns its id.
Result<std::string> CreateFromFlags(const SpecFlags& f);

struct ExecFlags {
  double timeout = 0;
  std::string cwd;
  std::vector<std::string> env;
  bool stdin_from_terminal = false;
  bool tty = false;
  std::vector<std::string> argv;
};
void AddExecFlags(CLI::App* cmd, ExecFlags* f);
// Runs the command in sandbox `id`, streaming its output to ours; returns the exit code the
// contract asks for (the command's, 124 on timeout, 128+N on signal N).
int ExecAndStream(const std::string& id, const ExecFlags& f);
// The same for `-t`: `req` (the exec request so far) gets a terminal of our size, ours goes
// raw, and with -i what we type goes to the command as it is typed (cli/exec_tty.cc).
int ExecOnTerminal(const std::string& id, const ExecFlags& f, nlohmann::json req);
// Streams exec `exec_id`'s output to our stdout and stderr, resuming where a broken stream
// stopped; its result.
Result<nlohmann::json> StreamExecOutput(const std::string& id, const std::string& exec_id);
// The exit code the contract asks for from an exec's result.
int ExitCodeOf(const std::string& id, const nlohmann::json& result);

// Subcommands: one file each.
void AddServe(CLI::App& app);
void AddNode(CLI::App& app);
// `warren node cordon|uncordon|drain NAME`, through the API (admin token).
void AddNodeAdmin(CLI::App* node);
void AddApiServer(CLI::App& app);
void AddBlobfsd(CLI::App& app);
void AddImage(CLI::App& app);
void AddCreate(CLI::App& app);
void AddExec(CLI::App& app);
void AddRun(CLI::App& app);
void AddLs(CLI::App& app);
void AddInspect(CLI::App& app);
void AddRm(CLI::App& app);
void AddCp(CLI::App& app);
void AddToken(CLI::App& app);
void AddPause(CLI::App& app);  // pause and resume
void AddNet(CLI::App& app);
void AddFs(CLI::App& app);    // fs
void AddDiff(CLI::App& app);  // diff
void AddSnapshot(CLI::App& app);
void AddFork(CLI::App& app);
void AddCall(CLI::App& app);
void AddVnc(CLI::App& app);  // a desktop sandbox's screen for VNC clients

}  // namespace warren::cli
