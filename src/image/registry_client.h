// Pulls images from an OCI registry over the distribution API (HTTP or HTTPS, libcurl).
//
// Auth: anonymous, Basic, or the token flow (a 401 with `WWW-Authenticate: Bearer realm=...`
// sends us to the realm for a token, with credentials if we have them). Manifest lists and
// OCI indexes choose linux/<host arch>. Every blob is checked against its digest and size
// before it is used. The pull writes an OCI layout, so reading it is shared with local imports.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "image/oci_image.h"

namespace warren::image {

struct ImageReference {
  std::string registry;    // host[:port]
  std::string repository;  // e.g. library/debian
  std::string tag;         // empty when pulled by digest
  std::string digest;      // "sha256:..." or empty
  std::string ToString() const;
};

// `[HOST[:PORT]/]REPO[:TAG][@sha256:HEX]`, defaulting like docker: docker.io, library/, latest.
Result<ImageReference> ParseImageReference(const std::string& ref);

struct RegistryOptions {
  std::string ca_file;      // CA bundle for the registry's certificate (default: the system's)
  bool insecure = false;    // accept plain HTTP and unverified certificates
  std::string credentials;  // "user:password"; empty for anonymous
  std::function<void(const std::string&)> progress;  // one line per step
};

// Pulls `ref` into an OCI layout at `dir` (which must exist and be empty) and reads it back.
// Loopback registries may speak plain HTTP without `insecure`, as docker allows.
Result<OciImage> PullImage(const ImageReference& ref, const std::string& dir,
                           const RegistryOptions& opts);

}  // namespace warren::image
