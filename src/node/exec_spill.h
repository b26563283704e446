// A write-through copy of a sandbox's exec records on disk, so that a daemon killed with -9
// and started again rebuilds them: finished results and output intact, running execs
// continuing where they were.
//
// One append-only journal file per sandbox (DATA_DIR/execs/SANDBOX.journal), made at its first
// exec, not files per exec: ext4 without a journal (this build host's root) makes creating an
// inode expensive when many were deleted recently (it skips them, reading their inode-table
// blocks), and three creates and three deletes per exec took 14% of the node's CPU in an exec
// loop (about 0.5 ms of a 4.5-5 ms round trip, measured A/B; a failing exec 3.2 -> 1.5 ms).
// Records of forgotten execs are dropped by rewriting the live ones to a new file once they
// are at least half of it.
//
// Writes go to the page cache (no fsync): they survive the daemon's death, which is what
// they are for; a host crash takes the sandboxes too. One write(2) per record (O_APPEND), so a
// daemon killed mid-write leaves at most a torn last record, which loading drops.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::node {

class ExecJournal;

// One exec's records in its sandbox's journal.
class ExecSpill {
 public:
  ~ExecSpill();
  // `kept`: the bytes the record kept; `received`: the bytes the agent sent (>= kept).
  void Append(int stream, std::string_view kept, uint64_t received);
  void Finish(const nlohmann::json& outcome);
  // Drops the exec's records when it is forgotten (not at daemon death: that is the point).
  void RemoveOnClose() { remove_ = true; }

  struct Loaded {
    nlohmann::json meta;  // + "outcome" when finished
    struct Frame {
      int stream;
      std::string kept;
      uint64_t received;
    };
    std::vector<Frame> frames;
    std::unique_ptr<ExecSpill> spill;  // appending to the same journal
  };

 private:
  friend class ExecJournal;
  ExecSpill(std::shared_ptr<ExecJournal> journal, uint32_t handle)
      : journal_(std::move(journal)), handle_(handle) {}
  std::shared_ptr<ExecJournal> journal_;
  uint32_t handle_;
  bool remove_ = false;
};

class ExecJournal : public std::enable_shared_from_this<ExecJournal> {
 public:
  // Nothing is touched on disk until the first Begin.
  explicit ExecJournal(std::string path) : path_(std::move(path)) {}

  // Starts an exec's records with `meta` (what rebuilding needs: id, binary, max_output,
  // started_unix).
  Result<std::unique_ptr<ExecSpill>> Begin(const nlohmann::json& meta);

  // The journal at `path` (absent: empty) and every exec it holds, oldest first, each
  // appending to it again. A torn last record is cut off, and dead records are dropped.
  static std::shared_ptr<ExecJournal> Load(const std::string& path,
                                           std::vector<ExecSpill::Loaded>* execs);

  // The sandbox is gone: removes the file; its records' later writes go nowhere.
  void Discard();

  const std::string& path() const { return path_; }
  uint64_t size() const;  // bytes in the file

 private:
  friend class ExecSpill;
  enum Type : uint8_t { kMeta = 1, kFrame = 2, kOutcome = 3, kForget = 4 };
  void Write(Type type, uint32_t handle, std::string_view a, std::string_view b = {});
  void Forget(uint32_t handle);
  Status OpenLocked();
  // Rewrites the file with the records of live execs only.
  Status CompactLocked();

  const std::string path_;
  mutable std::mutex mu_;
  UniqueFd fd_;
  bool discarded_ = false;
  bool failed_ = false;  // a write failed: the file no longer holds every record
  uint32_t next_handle_ = 1;
  std::map<uint32_t, uint64_t> live_;  // handle -> bytes of its records
  uint64_t size_ = 0;
  uint64_t dead_ = 0;  // bytes of forgotten execs' records
};

}  // namespace warren::node
