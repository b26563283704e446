// One fncall runner: a container sandbox made from the runner image (runner seccomp profile,
// see isolation/seccomp_policy.h) running the call dispatcher (agent/call_dispatcher.h, with
// zygote.py's python3 zygote) as a node-internal channel command. The node writes run requests
// to its stdin and reads results from its stdout; each run is one program in fresh namespaces
// under its own uid (see zygote.py for how).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "node/node_api.h"

namespace warren::fncall {

struct RunFile {
  std::string name;
  std::string data;
  uint32_t mode = 0644;
};

struct RunLimits {
  int64_t wall_ms = 10000;
  int64_t cpu_s = 10;  // RLIMIT_CPU (whole seconds; the wall limit is the precise one)
  uint64_t as_bytes = 256ull << 20;
  uint64_t stack_bytes = 64ull << 20;
  uint64_t fsize_bytes = 64ull << 20;
  uint64_t nproc = 64;
  uint64_t nofile = 256;
  uint64_t max_output = 1ull << 20;  // per stream
  // Past max_output: end the run (a call's output_limit), or keep it running and drop the
  // rest (an exec of a fncall sandbox, like a container's).
  bool kill_at_output_cap = true;
};

struct RunRequest {
  bool python = false;  // run `code` in the runner's warm interpreter instead of exec'ing argv
  std::string code;     // python
  std::string filename = "main.py";
  std::vector<std::string> args;
  std::vector<std::string> argv;  // exec
  std::map<std::string, std::string> env;
  std::vector<RunFile> files;  // written into the run's fresh /tmp
  std::string cwd = "/tmp";
  std::string stdin_data;
  RunLimits limits;
  std::vector<std::string> collect;  // files of /tmp to bring back (a compiler's output)
};

struct RunResult {
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  bool output_limit = false;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  int64_t wall_ms = 0;
  int64_t cpu_ms = 0;
  int64_t maxrss_kb = 0;
  std::string stdout_data;
  std::string stderr_data;
  std::vector<RunFile> files;
};

struct RunnerConfig {
  std::string id;                          // the runner sandbox's id
  std::vector<std::string> layer_digests;  // the runner image, top first
  std::string python = "python3";          // the interpreter that runs zygote.py
  uint64_t memory_bytes = 2ull << 30;      // the whole runner (all its calls)
  uint64_t disk_bytes = 1ull << 30;
  uint64_t pids = 2048;
  double cpus = 2.0;
  int max_workers = 4;                // calls running at once in this runner
  int prefork = 2;                    // workers kept ready
  uint64_t tmp_bytes = 256ull << 20;  // each call's /tmp
  std::string call_seccomp_bpf;       // each call's own filter (policy/seccomp-call.json)
  // warren-zygote.so (zygote_lib.c): the zygote's loop and a Python worker's set-up in C;
  // empty, or if it does not load in the runner's python3: zygote.py's own, in Python.
  std::shared_ptr<const std::string> zygote_lib;
};

// The environment a call runs in unless it sets its own. The runner's dispatcher and zygote
// run in it too, so a Python call that keeps it costs its worker nothing (see zygote.py).
const std::map<std::string, std::string>& DefaultCallEnv();

// Whether an exec'd run fits what its pid 1 can take (agent/native_request.h): its argv,
// environment, cwd, file names and names to bring back, as strings and as a count. A run past
// that is the caller's error (kInvalid), not its runner's.
Status CheckExecRun(const RunRequest& req);

class Runner {
 public:
  // Makes the sandbox, starts the dispatcher and waits until it is ready.
  static Result<std::shared_ptr<Runner>> Start(node::NodeApi* node, const RunnerConfig& cfg);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Runs one program; blocks until its result. An error means the runner could not run it
  // (the runner is then not healthy()); the program's own failures are in the result.
  Result<RunResult> Run(const RunRequest& req);
  // Runs it once per stdin (a judged call's cases), each in a fresh worker as Run's, at most
  // `parallel` at once: one request for them all, so the node pays one round trip and sends the
  // files once. Results in the order of `stdins`, each as Run's; blocks until every one is in,
  // or the runner failed (those without a result are then errors).
  std::vector<Result<RunResult>> RunCases(const RunRequest& req,
                                          const std::vector<std::string>& stdins, int parallel);

  const std::string& id() const { return cfg_.id; }
  // False once the dispatcher ended or reported damage: take it out of service.
  bool healthy() const;
  int inflight() const;
  uint64_t served() const;
  // Which zygote serves its workers: "native" (zygote_lib.c) or "python" (zygote.py's own).
  std::string zygote() const;
  // How many pages of the Python zygote ("python") and of the native forker ("native") every
  // worker they make gets copied at its clone rather than at its first write
  // (sys/copy_at_clone.h): {"python": {"pages": N, "why": ""}, "native": {...}}, the reason in
  // "why" where none.
  nlohmann::json copied_at_clone() const;
  // How the native forker makes a native worker's pid 1 (agent/native_forker.h).
  std::string native_pid1() const;
  // Deletes the sandbox (every call in it ends). Idempotent.
  void Stop();

 private:
  struct Pending {
    size_t left = 0;      // results still to come
    size_t parallel = 1;  // runs of it in flight at once (what inflight() counts)
    std::vector<Result<RunResult>> results;
    std::vector<bool> in;                            // results[i] came from the dispatcher
    std::chrono::steady_clock::time_point progress;  // its start, or its latest result
  };
  Runner(node::NodeApi* node, RunnerConfig cfg) : node_(node), cfg_(std::move(cfg)) {}
  void OnOutput(int stream, std::string_view data);
  void OnFrame(const std::string& header, std::string_view payload);
  void MarkDead(const std::string& why);

  node::NodeApi* node_;
  const RunnerConfig cfg_;
  std::string exec_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string inbuf_;    // stdout bytes not yet a whole frame (mux thread only)
  std::string errline_;  // the dispatcher's stderr, by line, to the log
  bool ready_ = false;
  bool dead_ = false;
  bool stopped_ = false;
  std::string dead_reason_;
  uint64_t next_id_ = 1;
  uint64_t served_ = 0;
  std::string zygote_;
  nlohmann::json copied_at_clone_ = nlohmann::json::object();
  std::string native_pid1_;
  std::map<uint64_t, std::shared_ptr<Pending>> pending_;
};

}  // namespace warren::fncall
