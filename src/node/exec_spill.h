// A write-through copy of one exec record on disk (DATA_DIR/execs/SANDBOX/EXEC.{meta,out}),
// so that a daemon killed with -9 and started again rebuilds its exec records: finished
// results and output intact, running execs continuing where they were.
//
// Writes go to the page cache (no fsync): they survive the daemon's death, which is what
// they are for; a host crash takes the sandboxes too. One write(2) per output chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace warren::node {

class ExecSpill {
 public:
  // Creates the files in `dir` (which must exist); `meta` holds what rebuilding needs (id,
  // binary, max_output).
  static Result<std::unique_ptr<ExecSpill>> Create(const std::string& dir, const std::string& exec_id,
                                                   const nlohmann::json& meta);
  ~ExecSpill();
  // `kept`: the bytes the record kept; `received`: the bytes the agent sent (>= kept).
  void Append(int stream, std::string_view kept, uint64_t received);
  void Finish(const nlohmann::json& outcome);
  // Deletes the files when the record is forgotten (not at daemon death: that is the point).
  void RemoveOnClose() { remove_ = true; }

  struct Loaded {
    nlohmann::json meta;  // + "outcome" when finished
    struct Frame {
      int stream;
      std::string kept;
      uint64_t received;
    };
    std::vector<Frame> frames;
    std::unique_ptr<ExecSpill> spill;  // reopened for appending
  };
  // Every exec spilled in `dir`, oldest first.
  static std::vector<Loaded> LoadDir(const std::string& dir);

 private:
  ExecSpill(std::string base, UniqueFd out) : base_(std::move(base)), out_(std::move(out)) {}
  std::string base_;  // DIR/EXEC
  UniqueFd out_;
  nlohmann::json meta_;
  bool remove_ = false;
};

}  // namespace warren::node
