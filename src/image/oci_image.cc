#include "image/oci_image.h"

#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "base/sha256.h"
#include "image/tar_extract.h"

namespace warren::image {
namespace {

using nlohmann::json;

// Image metadata files are small; anything larger is not metadata.
constexpr std::streamsize kMaxJson = 16 << 20;

Result<json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.tellp() > kMaxJson) return Invalid("metadata file too large", path);
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Invalid("malformed JSON", path);
  return j;
}

bool Exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

// "sha256:<hex>" -> DIR/blobs/sha256/<hex>, refusing anything that could leave the layout,
// and checked against its digest: a layout on disk is no more trusted than a registry.
Result<std::string> BlobFile(const std::string& dir, const json& descriptor) {
  std::string digest = descriptor.is_object() ? descriptor.value("digest", "") : "";
  size_t colon = digest.find(':');
  if (colon == std::string::npos || colon == 0) return Invalid("descriptor without a digest", dir);
  std::string alg = digest.substr(0, colon), hex = digest.substr(colon + 1);
  for (char c : alg + hex)
    if (!isalnum(static_cast<unsigned char>(c)))
      return Invalid("malformed digest `" + digest + "`", dir);
  std::string p = dir + "/blobs/" + alg + "/" + hex;
  if (!Exists(p)) return NotFound("blob " + digest, dir);
  if (alg != "sha256") return Invalid("unsupported digest algorithm `" + alg + "`", dir);
  std::string actual = WARREN_TRY(Sha256File(p));
  if (actual != hex)
    return Invalid("blob " + digest +
                       " does not match its digest (the content hashes to sha256:" + actual + ")",
                   dir);
  return p;
}

std::string RefName(const json& d) {
  if (!d.contains("annotations") || !d["annotations"].is_object()) return "";
  return d["annotations"].value("org.opencontainers.image.ref.name", "");
}

// "docker.io/library/debian:12" -> "debian:12", as docker shows names.
std::string Familiar(std::string n) {
  for (const char* p : {"docker.io/", "index.docker.io/", "registry-1.docker.io/"})
    if (n.rfind(p, 0) == 0) {
      n = n.substr(strlen(p));
      if (n.rfind("library/", 0) == 0) n = n.substr(8);
      break;
    }
  return n;
}

// A descriptor's ref name matches "TAG", "REPO:TAG" or a full name ending in ":TAG".
bool RefMatches(const std::string& have, const std::string& want) {
  if (have == want || Familiar(have) == Familiar(want)) return true;
  size_t colon = have.rfind(':');
  return colon != std::string::npos && have.substr(colon + 1) == want;
}

Result<OciImage> ReadManifest(const std::string& dir, const json& descriptor, int depth) {
  if (depth > 4) return Invalid("image indexes nest too deeply", dir);
  std::string path = WARREN_TRY(BlobFile(dir, descriptor));
  json m = WARREN_TRY(ReadJsonFile(path));
  std::string mt = m.value("mediaType", descriptor.value("mediaType", ""));
  if (IsIndexMediaType(mt) || (m.contains("manifests") && !m.contains("layers"))) {
    json d = WARREN_TRY(ChoosePlatform(m, "image index " + descriptor.value("digest", "")));
    return ReadManifest(dir, d, depth + 1);
  }
  if (!m.contains("layers") || !m["layers"].is_array())
    return Invalid("manifest has no layers", descriptor.value("digest", ""));
  OciImage img;
  img.manifest_digest = descriptor.value("digest", "");
  if (m.contains("config")) {
    auto cfg = BlobFile(dir, m["config"]);
    if (cfg.ok()) {
      auto c = ReadJsonFile(*cfg);
      if (c.ok()) img.config = *c;
    }
  }
  for (const auto& l : m["layers"]) img.layers.push_back(WARREN_TRY(BlobFile(dir, l)));
  return img;
}

Result<OciImage> ReadLayout(const std::string& dir, const std::string& ref_name) {
  json index = WARREN_TRY(ReadJsonFile(dir + "/index.json"));
  if (!index.contains("manifests") || !index["manifests"].is_array() || index["manifests"].empty())
    return Invalid("index.json lists no images", dir);
  const json& ms = index["manifests"];
  if (ref_name.empty()) {
    // Several entries may be the platforms of one image: choose as a manifest list would.
    std::vector<std::string> names;
    for (const auto& d : ms)
      if (!RefName(d).empty() && std::find(names.begin(), names.end(), RefName(d)) == names.end())
        names.push_back(RefName(d));
    if (names.size() > 1) {
      std::string list;
      for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
      return Invalid("the layout holds several images (" + list + "): name one as PATH:NAME", dir);
    }
    if (ms.size() == 1) return ReadManifest(dir, ms[0], 0);
    json d = WARREN_TRY(ChoosePlatform(index, "index.json"));
    return ReadManifest(dir, d, 0);
  }
  json matching = json::array();
  for (const auto& d : ms)
    if (RefMatches(RefName(d), ref_name)) matching.push_back(d);
  if (matching.empty()) return NotFound("image `" + ref_name + "`", dir);
  if (matching.size() == 1) return ReadManifest(dir, matching[0], 0);
  json d = WARREN_TRY(ChoosePlatform(json{{"manifests", matching}}, ref_name));
  return ReadManifest(dir, d, 0);
}

// The classic `docker save` layout: manifest.json lists each image's config and layer tars.
Result<OciImage> ReadDockerSave(const std::string& dir, const std::string& ref_name) {
  json m = WARREN_TRY(ReadJsonFile(dir + "/manifest.json"));
  if (!m.is_array() || m.empty()) return Invalid("manifest.json lists no images", dir);
  const json* chosen = nullptr;
  if (ref_name.empty()) {
    if (m.size() > 1) {
      std::string names;
      for (const auto& img : m)
        for (const auto& t : img.value("RepoTags", json::array()))
          if (t.is_string()) names += (names.empty() ? "" : ", ") + Familiar(t.get<std::string>());
      return Invalid("the archive holds several images (" + (names.empty() ? "untagged" : names) +
                         "): name one as PATH:NAME",
                     dir);
    }
    chosen = &m[0];
  } else {
    for (const auto& img : m)
      if (img.contains("RepoTags") && img["RepoTags"].is_array())
        for (const auto& t : img["RepoTags"])
          if (t.is_string() && RefMatches(t.get<std::string>(), ref_name)) chosen = &img;
    if (!chosen) return NotFound("image `" + ref_name + "`", dir);
  }
  if (!chosen->contains("Layers") || !(*chosen)["Layers"].is_array())
    return Invalid("manifest.json entry has no Layers", dir);
  OciImage img;
  for (const auto& l : (*chosen)["Layers"]) {
    bool bad = false;
    std::string rel = l.is_string() ? CleanTarPath(l.get<std::string>(), &bad) : "";
    if (bad || rel.empty()) return Invalid("bad layer path in manifest.json", dir);
    if (!Exists(dir + "/" + rel)) return NotFound("layer " + rel, dir);
    img.layers.push_back(dir + "/" + rel);
  }
  if (chosen->contains("Config") && (*chosen)["Config"].is_string()) {
    bool bad = false;
    std::string rel = CleanTarPath((*chosen)["Config"].get<std::string>(), &bad);
    auto c = bad ? Result<json>(Invalid("bad config path")) : ReadJsonFile(dir + "/" + rel);
    if (c.ok()) img.config = *c;
  }
  return img;
}

}  // namespace

std::string HostOciArchitecture() {
  utsname u{};
  uname(&u);
  std::string m = u.machine;
  if (m == "x86_64") return "amd64";
  if (m == "aarch64") return "arm64";
  if (m == "i686" || m == "i386") return "386";
  return m;
}

bool IsIndexMediaType(const std::string& mt) {
  return mt == "application/vnd.oci.image.index.v1+json" ||
         mt == "application/vnd.docker.distribution.manifest.list.v2+json";
}

Result<json> ChoosePlatform(const json& index, const std::string& what) {
  if (!index.contains("manifests") || !index["manifests"].is_array())
    return Invalid("image index without manifests", what);
  const std::string arch = HostOciArchitecture();
  std::string offered;
  for (const auto& d : index["manifests"]) {
    if (!d.is_object()) continue;
    if (!d.contains("platform") || !d["platform"].is_object()) {
      if (index["manifests"].size() == 1) return d;
      continue;
    }
    std::string os = d["platform"].value("os", ""), a = d["platform"].value("architecture", "");
    offered += (offered.empty() ? "" : ", ") + os + "/" + a;
    if (os == "linux" && a == arch) return d;
  }
  return NotFound(
      "a linux/" + arch + " image (offered: " + (offered.empty() ? "none" : offered) + ")", what);
}

Result<OciImage> ReadOciDir(const std::string& dir, const std::string& ref_name) {
  if (Exists(dir + "/index.json")) return ReadLayout(dir, ref_name);
  if (Exists(dir + "/manifest.json")) return ReadDockerSave(dir, ref_name);
  return Invalid("neither an OCI image layout (index.json) nor a docker save (manifest.json)", dir);
}

Status UnpackImageArchive(const std::string& archive_path, const std::string& dest) {
  return ExtractTar(archive_path, dest).Context("unpack image archive");
}

}  // namespace warren::image
