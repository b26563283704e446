#include "server/layer_service.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include "base/ids.h"
#include "base/utf8.h"
#include "server/api_types.h"

namespace warren::server {

using nlohmann::json;

std::set<std::string> LayerService::DigestsInUse() {
  std::set<std::string> used;
  for (const auto& l : state_->ListLayers()) used.insert(l.digest);
  // From the stored JSON, not the typed records: a record this version cannot parse still
  // keeps its blobs.
  for (const json& sb : state_->ListSandboxes())
    if (sb.contains("layers") && sb["layers"].is_array())
      for (const auto& l : sb["layers"])
        if (l.is_object() && l.contains("digest") && l["digest"].is_string())
          used.insert(l["digest"].get<std::string>());
  return used;
}

void LayerService::Collect(const std::vector<std::string>& digests) {
  // The usual case is cheap: a digest some name still points at stays. Only the others need
  // the scan of every sandbox record (a delete of each of 1,000 sandboxes must not scan
  // 1,000 records each).
  std::vector<std::string> candidates;
  for (const auto& d : digests)
    if (!d.empty() && state_->LayerRefs(d) == 0) candidates.push_back(d);
  if (candidates.empty()) return;
  std::unique_lock lock(gc_mu_);
  std::set<std::string> used = DigestsInUse();
  bool chunked = false;
  for (const auto& d : candidates)
    if (!used.count(d)) {
      chunked = chunked || store_->IsChunked(d);
      Status st = store_->Remove(d);
      if (!st.ok()) spdlog::warn("garbage-collect blob: {}", st.ToString());
    }
  // A removed chunked layer's chunks go unless another layer names them. Ten minutes of
  // grace: an import stores its chunks before its manifest.
  if (chunked) store_->CollectChunks(kChunkGraceS);
}

void LayerService::Sweep() {
  store_->ClearTemp();
  std::unique_lock lock(gc_mu_);
  std::set<std::string> used = DigestsInUse();
  for (const auto& d : store_->ListDigests())
    if (!used.count(d)) {
      spdlog::info("removing unreferenced layer blob {}", d);
      (void)store_->Remove(d);
    }
  store_->CollectChunks(kChunkGraceS);
}

Result<json> LayerService::Upload(const std::map<std::string, std::string>& q,
                                  const std::string& body_path) {
  for (auto& [k, v] : q)
    if (k != "name" && k != "tag" && k != "kind" && k != "source")
      return Invalid("unknown query parameter `" + k + "`");
  auto get = [&](const char* k, const char* def) {
    auto it = q.find(k);
    return it == q.end() ? std::string(def) : it->second;
  };
  std::string name = get("name", ""), tag = get("tag", "latest"), kind = get("kind", "base");
  // Where the builder got the content (free text, shown by `image ls`).
  std::string source = get("source", "");
  if (source.size() > 512) return Invalid("`source` is at most 512 bytes");
  source = SanitizeUtf8(source);
  std::string n, t;
  WARREN_RETURN_IF_ERROR(ParseImageRef(name + ":" + tag, &n, &t));
  if (kind != "base" && kind != "workspace" && kind != "tool")
    return Invalid("`kind` must be base, workspace or tool");
  bool erofs = image::LayerStore::IsErofs(body_path);
  auto blob = erofs ? store_->ImportErofs(body_path) : store_->ImportTar(body_path);
  if (!blob.ok()) return blob.status().Context("build image " + name + ":" + tag);
  LayerRecord rec{name,      tag,          blob->digest,
                  kind,      NowRfc3339(), !source.empty() ? source : erofs ? "erofs" : "tar",
                  blob->size};
  // A moved tag may leave its old blob unreferenced.
  auto old = state_->GetLayer(name, tag);
  WARREN_RETURN_IF_ERROR(state_->PutLayer(rec));
  if (old.ok() && old->digest != rec.digest) Collect({old->digest});
  return rec.ToJson();
}

Result<json> LayerService::NameSnapshot(const std::string& ref, const std::string& digest,
                                        uint64_t size, const std::string& source,
                                        std::string* moved_from) {
  std::string name, tag;
  WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
  if (!store_->Has(digest))
    return Internal("name snapshot", ref, "its blob " + digest + " is not in the layer store");
  LayerRecord rec{name, tag, digest, "workspace", NowRfc3339(), source, size};
  auto old = state_->GetLayer(name, tag);
  if (old.ok() && old->kind != "workspace")
    return Status(Code::kConflict, "name snapshot", ref,
                  "it names a " + old->kind + " layer; a snapshot is a workspace layer");
  WARREN_RETURN_IF_ERROR(state_->PutLayer(rec));
  if (old.ok() && old->digest != rec.digest) *moved_from = old->digest;
  return rec.ToJson();
}

uint64_t LayerService::Bytes(const std::string& digest) const {
  if (store_->IsChunked(digest)) {
    auto m = store_->Manifest(digest);
    return m.ok() ? (*m)->meta_size + (*m)->ChunkBytes() : 0;
  }
  struct stat st;
  return stat(store_->BlobPath(digest).c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

Result<json> LayerService::List() {
  json arr = json::array();
  for (const auto& l : state_->ListLayers()) arr.push_back(l.ToJson());
  return json{{"layers", arr}};
}

Result<json> LayerService::Get(const std::string& ref) {
  std::string name, tag;
  WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
  const LayerRecord rec = WARREN_TRY(state_->GetLayer(name, tag));
  json j = rec.ToJson();
  j["format"] = "whole";
  if (store_->IsChunked(rec.digest)) {
    auto m = store_->Manifest(rec.digest);
    j["format"] = "chunked";
    if (m.ok()) {
      j["chunks"] = (*m)->chunks.size();
      j["meta_bytes"] = (*m)->meta_size;
      j["chunk_bytes"] = (*m)->ChunkBytes();
      j["chunk_size"] = (*m)->chunk_size;
    }
  }
  return j;
}

Status LayerService::Delete(const std::string& ref) {
  std::string name, tag;
  WARREN_RETURN_IF_ERROR(ParseImageRef(ref, &name, &tag));
  auto rec = WARREN_TRY(state_->GetLayer(name, tag));
  WARREN_RETURN_IF_ERROR(state_->RemoveLayer(name, tag));
  // The blob stays while a sandbox made from it exists; new sandboxes cannot use the name.
  Collect({rec.digest});
  return Status::Ok();
}

}  // namespace warren::server
