// warren blobfsd: the node's block daemon for chunked layers (blobfs/fuse_server.h). A node
// (`warren serve` or `warren node` with a chunked layer store) starts and supervises it;
// it is not meant to be run by hand, but can be, to inspect a store.
#include <spdlog/spdlog.h>

#include "base/size.h"
#include "blobfs/fuse_server.h"
#include "cli/common.h"

namespace warren::cli {

void AddBlobfsd(CLI::App& app) {
  auto* cmd = app.add_subcommand("blobfsd", "serve chunked layers' blobs over FUSE (run by nodes)");
  cmd->group("");  // internal: not listed in --help
  struct Flags {
    blobfs::BlobfsdOptions opts;
    std::string cache_size = "0";
    std::string readahead_max = "1M";
    bool no_fill = false;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--store", f->opts.store_root, "the node's layer store directory")->required();
  cmd->add_option("--source", f->opts.source, "the shared layer store (directory or URL)")
      ->required();
  cmd->add_option("--publish", f->opts.publish,
                  "the shared store's directory, for traces and prefetch packs, when --source "
                  "is a URL over it");
  cmd->add_option("--mount", f->opts.mountpoint, "where to mount")->required();
  cmd->add_option("--cache-size", f->cache_size,
                  "bound on cached chunks (e.g. 50G); evicts to 90% when passed (0: none)");
  cmd->add_option("--prefetch-threads", f->opts.layers.prefetch_threads)->check(CLI::Range(0, 64));
  cmd->add_option("--trace-window", f->opts.layers.trace_window_s,
                  "seconds of a layer's first use recorded as its prefetch trace")
      ->check(CLI::Range(1.0, 3600.0));
  cmd->add_option("--readahead-kb", f->opts.readahead_kb,
                  "KiB the kernel reads ahead in a blob file, below the EROFS mount's own")
      ->check(CLI::Range(0, 16384));
  cmd->add_flag("--no-fill-page-cache", f->no_fill,
                "do not put traced chunks in the kernel's page cache ahead of reads");
  cmd->add_option("--readahead-max", f->readahead_max,
                  "the largest window fetched ahead of a sequential reader (0: none)");
  cmd->callback([f] {
    auto ahead = ParseSize(f->readahead_max);
    if (!ahead) return void(ExitCode() = Fail(Invalid("bad --readahead-max", f->readahead_max)));
    f->opts.layers.readahead_max = *ahead;
    auto size = ParseSize(f->cache_size);
    if (!size) return void(ExitCode() = Fail(Invalid("bad --cache-size", f->cache_size)));
    f->opts.cache_high = *size;
    f->opts.cache_low = *size / 10 * 9;
    f->opts.fill_page_cache = !f->no_fill;
    ExitCode() = blobfs::RunBlobfsd(f->opts);
  });
}

}  // namespace warren::cli
