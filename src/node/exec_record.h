// One exec's output and outcome, as the node holds it: sequenced chunks, capped per stream
// on the host side (whatever the agent sends, a record never holds more than max_output
// bytes of each stream), and waiters to wake when something changes. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "node/exec_spill.h"

namespace warren::node {

struct OutputChunk {
  uint64_t seq;
  int stream;  // 1 stdout, 2 stderr
  std::string data;
};

struct ExecOutcome {
  int exit_code = -1;
  std::string signal;  // "" when not killed by a signal
  bool timed_out = false;
  bool truncated[2] = {false, false};
  std::string error;         // the sandbox died or the exec could not start
  bool not_started = false;  // `error` is the agent's: the command could not start (bad cwd)
};

// One exec as a sandbox's history lists it: what ran, when, and how it ended, without its
// output (GET /v1/sandboxes/{id}/execs).
struct ExecSummary {
  std::string exec_id;
  std::vector<std::string> argv;  // empty for a record restored from before argv was kept
  double started_unix = 0;
  bool running = true;
  std::optional<int> exit_code;
  std::string signal;
  bool timed_out = false;
  int64_t duration_ms = 0;
  uint64_t output_bytes = 0;  // held on the node, both streams
};

// Output bytes a whole sandbox may hold on the host at once (all its exec records, running or
// kept): however many commands an occupant runs, host memory stays bounded. Shared by the
// records of one sandbox.
struct OutputBudget {
  explicit OutputBudget(uint64_t limit) : limit(limit) {}
  const uint64_t limit;
  std::atomic<uint64_t> used{0};
  // Takes up to `want` bytes; returns how many were granted.
  uint64_t Take(uint64_t want);
  void Give(uint64_t n) { used.fetch_sub(n); }
};

class ExecRecord {
 public:
  ExecRecord(std::string id, std::string sandbox_id, uint64_t max_output, bool binary,
             std::shared_ptr<OutputBudget> budget = nullptr);
  ~ExecRecord();

  const std::string& id() const { return id_; }
  const std::string& sandbox_id() const { return sandbox_id_; }
  bool binary() const { return binary_; }
  // How the command takes input: `stdin_open`, input may be written while it runs; `tty`, it
  // has a terminal, which can be resized. Set once, before the record is shared.
  void SetInput(bool stdin_open, bool tty) {
    stdin_open_ = stdin_open;
    tty_ = tty;
  }
  bool stdin_open() const { return stdin_open_; }
  bool tty() const { return tty_; }
  // What runs, for the sandbox's exec history. Set once, before the record is shared.
  void SetCommand(std::vector<std::string> argv) { argv_ = std::move(argv); }
  ExecSummary Summary() const;

  void AppendOutput(int stream, std::string_view data);
  void Finish(const ExecOutcome& outcome);
  // With a finisher, Finish() hands the finished record to it instead of announcing the end:
  // waiters, streams and done() see the exec end only when the finisher calls Publish() (used
  // to write a trajectory step durably before anyone is told the result).
  void SetFinisher(std::function<void()> f);
  void Publish();
  // Seconds from start to finish (0 until finished).
  double run_seconds() const;
  // Done and announced.
  bool done() const;
  // A finished record rebuilt from a stored result (a replayed trajectory step).
  static std::shared_ptr<ExecRecord> Replayed(const nlohmann::json& result,
                                              const std::string& sandbox_id,
                                              const std::string& stdout_raw,
                                              const std::string& stderr_raw);
  // A record whose result comes later from Complete() (a replayed step that re-runs first).
  static std::shared_ptr<ExecRecord> Pending(const std::string& exec_id,
                                             const std::string& sandbox_id, bool binary);
  // Ends the record with `result`'s outcome and these bytes as its output: `replayed` as
  // given, and `extra` fields added to its result (a re-run's divergence report).
  void Complete(const nlohmann::json& result, const std::string& stdout_raw,
                const std::string& stderr_raw, bool replayed, nlohmann::json extra = nullptr);
  // A copy of a record another process holds (an API server's mirror of a node's exec, fed
  // by its stream): its chunks keep their sequence numbers, so that a client resuming with
  // `?after=SEQ` at any API server reads on where it stopped. `seq` must grow.
  void AppendChunk(uint64_t seq, int stream, std::string_view data);
  // Ends such a copy with the holder's result (its outcome and duration) and the seq of its
  // result line (one past its last chunk's, whatever this copy received).
  void FinishWith(const nlohmann::json& result, uint64_t result_seq);
  // One stream's bytes as received (1 stdout, 2 stderr).
  std::string RawOutput(int stream) const;
  // Keeps a copy on disk from now on (see exec_spill.h); the files go with the record.
  void AttachSpill(std::unique_ptr<ExecSpill> spill);
  // Bytes the agent sent per stream (stdout, stderr), kept or not: where a resumed agent
  // continues from.
  std::pair<uint64_t, uint64_t> received() const;
  // What Restore needs to rebuild this record as it is now (the output kept and received per
  // stream), without a spill: a memory fork's child follows its parent's running commands.
  ExecSpill::Loaded CopyForFork() const;
  // A record rebuilt from its spill files after a daemon restart.
  static std::shared_ptr<ExecRecord> Restore(ExecSpill::Loaded loaded,
                                             const std::string& sandbox_id,
                                             std::shared_ptr<OutputBudget> budget);

  struct Snapshot {
    std::vector<OutputChunk> chunks;  // seq > after
    bool done = false;
  };
  // Returns what came after `after`. When there is nothing new and the exec is not done,
  // `notify` (if set) is kept and called once on the next change, from another thread.
  Snapshot Poll(uint64_t after, std::function<void()> notify);

  // How the command ended (meaningful once done()), without building the result's output.
  ExecOutcome outcome() const;
  // The contract's ExecResult; the final seq is used for the stream's result line.
  nlohmann::json ResultJson() const;
  // The same once the command ended, even before the end is announced (for the finisher).
  nlohmann::json FinalResultJson() const;
  uint64_t last_seq() const;
  // Output bytes held (both streams).
  uint64_t bytes() const;
  // Blocks until done or `timeout_ms` passes; true if done.
  bool WaitDone(int timeout_ms);
  // Whether the command runs and someone waits on it: a blocking exec call (WaitDone), a
  // stream (Poll with `notify`), a cluster API server's mirror. A waiter that left is counted
  // until the record next changes.
  bool awaited() const;

 private:
  void NotifyLocked(std::vector<std::function<void()>>* out) REQUIRES(mu_);
  static ExecOutcome OutcomeOf(const nlohmann::json& result);
  nlohmann::json ResultJsonLocked(bool done) const REQUIRES(mu_);

  const std::string id_, sandbox_id_;
  const std::shared_ptr<OutputBudget> budget_;
  const uint64_t max_output_;
  const bool binary_;
  bool stdin_open_ = false, tty_ = false;  // SetInput
  std::vector<std::string> argv_;          // SetCommand
  double started_ GUARDED_BY(mu_);         // monotonic; set back when restored from a spill
  mutable Mutex mu_;
  std::vector<OutputChunk> chunks_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t bytes_[2] GUARDED_BY(mu_) = {0, 0};
  bool host_truncated_[2] GUARDED_BY(mu_) = {false, false};
  std::unique_ptr<ExecSpill> spill_ GUARDED_BY(mu_);
  uint64_t received_[2] GUARDED_BY(mu_) = {0, 0};
  bool done_ GUARDED_BY(mu_) = false;       // the command ended
  bool published_ GUARDED_BY(mu_) = false;  // ... and the end is announced
  // Copies of `published_` and of bytes_[0] + bytes_[1], written with them, read without the
  // lock: ExecBook reads both of the records it admits and settles on each exec, and taking
  // each record's lock for it cost 10-15 us of a 1.06 ms round trip (A/B, bench/RESULTS.md
  // "Against the floor").
  std::atomic<bool> published_copy_{false};
  std::atomic<uint64_t> bytes_copy_{0};
  bool replayed_ GUARDED_BY(mu_) = false;
  int64_t fixed_duration_ms_ GUARDED_BY(mu_) = -1;
  nlohmann::json extra_ GUARDED_BY(mu_);  // object or null: fields Complete() adds to the result
  std::function<void()> finisher_ GUARDED_BY(mu_);
  double finished_ GUARDED_BY(mu_) = 0;
  ExecOutcome outcome_ GUARDED_BY(mu_);
  std::vector<std::function<void()>> waiters_ GUARDED_BY(mu_);
};

// The exec records of one sandbox, by id and in start order; the caller locks. Admitting one
// costs what is running, not what is kept: a long-lived sandbox keeps 1,024 finished records,
// and walking them all on every exec (the running count, the output they hold) was 30 us of a
// 1 ms round trip. So records not yet seen finished are kept apart (`live_`), and the output of
// the finished ones is a running total: a finished record's output never changes again.
using ExecMap = std::map<std::string, std::shared_ptr<ExecRecord>>;
class ExecBook {
 public:
  // Admits `rec` unless `max_running` are running already (kQuota), then forgets the oldest
  // finished records while more than `keep_count` are held or they hold more than `keep_bytes`
  // of output.
  Status Admit(const std::shared_ptr<ExecRecord>& rec, size_t max_running, size_t keep_count,
               uint64_t keep_bytes);
  // A record a restarted node found (running or finished), past every limit.
  void Adopt(std::shared_ptr<ExecRecord> rec);
  std::shared_ptr<ExecRecord> Find(const std::string& id) const;
  const ExecMap& records() const { return by_id_; }
  // The kept records, in start order.
  std::vector<ExecSummary> Summaries() const;
  size_t Running() const;

 private:
  void Settle();  // counts the live records that have finished as finished

  ExecMap by_id_;
  std::deque<std::shared_ptr<ExecRecord>> order_;  // start order
  std::unordered_set<const ExecRecord*> live_;     // kept and not yet seen finished
  uint64_t finished_bytes_ = 0;                    // output of the kept ones seen finished
};

// JSON for one stream line: {"seq", "stream", "data"} (+ "data_b64" when binary).
nlohmann::json ChunkJson(const OutputChunk& c, bool binary);

}  // namespace warren::node
