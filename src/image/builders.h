// The image builders: each turns one kind of source into a single rootfs tar, which the
// server then makes into an EROFS layer (LayerStore::ImportTar). Builders run where the
// source is (the CLI's machine): the server never fetches anything on a tenant's behalf.
//
//   --from-dir DIR        the tree as it is on disk (owners, modes, xattrs kept)
//   --from-tar FILE       used as is (plain, gzip, zstd, xz)
//   --from-oci SOURCE     an OCI layout dir, a `docker save`/OCI archive, either with
//                         `:NAME` to pick one image, or a registry reference; flattened
//   --debian SUITE        a Debian userland from mmdebstrap (+ --packages)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "image/registry_client.h"

namespace warren::image {

struct BuildSource {
  std::string from_dir, from_tar, from_oci, debian_suite;
  std::vector<std::string> packages;  // with debian_suite
  // With debian_suite: a desktop to start from (kDesktopPackages: an X server, a window
  // manager, a terminal, an editor), for sandboxes with a `display`.
  bool desktop = false;
  std::string debian_mirror;  // empty: mmdebstrap's default (deb.debian.org)
  RegistryOptions registry;
  std::function<void(const std::string&)> progress;
};

struct BuiltTar {
  std::string path;    // the tar to upload
  std::string source;  // what it was made from, for the layer record ("oci:REF@sha256:...")
};

// Produces the tar in `work_dir` (an empty scratch directory the caller removes).
Result<BuiltTar> BuildRootfsTar(const BuildSource& src, const std::string& work_dir);

}  // namespace warren::image
