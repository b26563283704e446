// Flattens the layers of an OCI image into one tar, the way the image's rootfs looks when
// the layers are stacked: upper entries win, `.wh.NAME` whiteouts delete NAME from lower
// layers, `.wh..wh..opq` hides a directory's lower contents.
//
// The merge streams: layers are read top-down and each entry is written at most once, so no
// tree is unpacked on disk and no root privilege is needed (owners, device nodes, setuid bits,
// xattrs and long names pass through as tar metadata). A hard link whose target an upper
// layer replaced keeps the lower content: the first visible link takes the data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::image {

struct FlattenStats {
  uint64_t entries = 0;  // written
  uint64_t bytes = 0;    // file data written
  uint64_t hidden = 0;   // lower entries dropped (replaced or whited out)
};

// `layers`: layer blob files (tar, optionally gzip/zstd compressed), bottom first.
// `on_layer(i)` is called as layer i (bottom-first index) starts, for progress output.
Result<FlattenStats> FlattenLayers(const std::vector<std::string>& layers,
                                   const std::string& out_tar,
                                   const std::function<void(size_t)>& on_layer = {});

}  // namespace warren::image
