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
#include "runtime/vm/microvm_backend.h"

namespace warren::node {

class MemoryForks {
 public:
  static constexpr int64_t kAbandonedMs = 10 * 60 * 1000;

  // Holds `image`, captured from sandbox `parent`: its token.
  std::string Add(std::shared_ptr<const runtime::vm::MemoryImage> image, const std::string& parent);
  // The image of fork `token`; kNotFound once it ended.
  Result<std::shared_ptr<const runtime::vm::MemoryImage>> Find(const std::string& token);
  void End(const std::string& token);
  void Clear();
  size_t size() const;

 private:
  struct Fork {
    std::shared_ptr<const runtime::vm::MemoryImage> image;
    std::string parent;
    int64_t made_ms = 0;
  };
  void DropAbandonedLocked(int64_t now_ms);

  mutable std::mutex mu_;
  std::map<std::string, Fork> forks_;
};

}  // namespace warren::node
