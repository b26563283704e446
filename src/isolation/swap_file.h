// A swap file of the node's own on a local disk (`--swap file:PATH`): costs no RAM, and a page
// comes back from it at the disk's speed (slower to wake from than zram). The node creates the
// file (never takes over one that exists), allocates it whole (a swap file may have no holes),
// formats and turns it on, and turns it off and deletes it when it stops with nothing in it.
//
// ext4 and xfs hold swap files; btrfs only without copy-on-write, tmpfs and overlayfs not at
// all (swapon: EINVAL), which the error says.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "isolation/node_swap.h"

namespace warren::isolation {

class SwapFile final : public NodeSwap {
 public:
  // Creates `path` (which must not exist) of `bytes`, and turns it on as swap. `state_file`
  // names it for the next run. A failure deletes the file.
  static Result<std::unique_ptr<SwapFile>> Create(const std::string& path, uint64_t bytes,
                                                  const std::string& state_file);
  // The file `path` (named by `state_file`), which is active swap.
  static std::unique_ptr<SwapFile> Adopt(const std::string& path, const std::string& state_file);

  ~SwapFile() override { (void)Release(); }
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  Status Release() override;
  void Detach() override { owned_ = false; }
  SwapStats Stats() const override;
  uint64_t RamBytes() const override { return 0; }  // a file's pages take no RAM
  const std::string& device() const override { return path_; }

 private:
  SwapFile() = default;
  // Create with `path` resolved.
  static Result<std::unique_ptr<SwapFile>> CreateAt(const std::string& path, uint64_t bytes,
                                                    const std::string& state_file);
  bool owned_ = false;
  std::string path_;
  std::string state_file_;
};

}  // namespace warren::isolation
