// The memory forks a node holds (issue 30): each a microVM's captured RAM and devices
// (runtime::vm::MemoryImage), named by a token the API passes with each child's create, kept
// until the API ends the fork. A fork the API never ends (it died mid-fork) goes after a while.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "node/exec_spill.h"
#include "runtime/vm/microvm_backend.h"

namespace warren::node {

class MemoryForks {
 public:
  static constexpr int64_t kAbandonedMs = 10 * 60 * 1000;

  // An exec record as the parent's node held it when the parent stopped (no spill).
  struct ExecCopy {
    nlohmann::json meta;
    std::vector<ExecSpill::Loaded::Frame> frames;
  };
  struct Fork {
    std::shared_ptr<const runtime::vm::MemoryImage> image;
    std::vector<ExecCopy> execs;  // the parent's commands running then
    std::string parent;
    int64_t made_ms = 0;
  };

  // Holds `image` and `execs`, captured from sandbox `parent`: its token.
  std::string Add(std::shared_ptr<const runtime::vm::MemoryImage> image,
                  std::vector<ExecSpill::Loaded> execs, const std::string& parent);
  // Fork `token` (shared: each child takes its own copies); kNotFound once it ended.
  Result<std::shared_ptr<const Fork>> Find(const std::string& token);
  void End(const std::string& token);
  void Clear();
  size_t size() const;

 private:
  void DropAbandonedLocked(int64_t now_ms);

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Fork>> forks_;
};

}  // namespace warren::node
