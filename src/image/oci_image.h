// Reading OCI images from disk: an OCI image layout directory (`oci-layout`, `index.json`,
// `blobs/`), or a `docker save` archive / OCI archive unpacked into one. Registry pulls write
// an OCI layout too (registry_client.h), so everything after the fetch is shared.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace warren::image {

struct OciImage {
  std::vector<std::string> layers;  // blob files, bottom first
  std::string manifest_digest;      // "sha256:..." when known
  nlohmann::json config;            // the image config (Env, Cmd, ...); may be null
};

// The platform Warren runs images for: linux and this host's architecture (amd64 here).
std::string HostOciArchitecture();

// From an image index or manifest list, the descriptor of the manifest for this host's
// platform. Attestation and other-platform entries are skipped.
Result<nlohmann::json> ChoosePlatform(const nlohmann::json& index, const std::string& what);

// True for media types of image indexes / manifest lists.
bool IsIndexMediaType(const std::string& media_type);

// Reads an image from a directory holding an OCI layout or an unpacked `docker save`.
// `ref_name` picks one of several images (an OCI `ref.name` annotation, a docker
// `REPO:TAG`, or just the tag); empty means the only one.
Result<OciImage> ReadOciDir(const std::string& dir, const std::string& ref_name);

// Unpacks a `docker save` or OCI archive (tar, optionally compressed) into `dest`.
Status UnpackImageArchive(const std::string& archive_path, const std::string& dest);

}  // namespace warren::image
