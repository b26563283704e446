#include "image/registry_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "base/unique_fd.h"

namespace warren::image {
namespace {

using nlohmann::json;

constexpr size_t kMaxManifest = 4 << 20;
constexpr const char* kManifestAccept =
    "application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool IsLoopbackHost(const std::string& registry) {
  std::string host = registry;
  if (!host.empty() && host[0] == '[')
    host = host.substr(1, host.find(']') - 1);
  else
    host = host.substr(0, host.rfind(':') == std::string::npos ? host.size() : host.rfind(':'));
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Splits `Bearer realm="a",service="b",scope="c"` into its scheme and parameters.
std::map<std::string, std::string> ParseChallenge(const std::string& h, std::string* scheme) {
  std::map<std::string, std::string> out;
  size_t sp = h.find(' ');
  *scheme = h.substr(0, sp);
  for (auto& c : *scheme) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  size_t i = sp == std::string::npos ? h.size() : sp + 1;
  while (i < h.size()) {
    while (i < h.size() && (h[i] == ' ' || h[i] == ',')) ++i;
    size_t eq = h.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = h.substr(i, eq - i), val;
    i = eq + 1;
    if (i < h.size() && h[i] == '"') {
      size_t end = h.find('"', i + 1);
      if (end == std::string::npos) end = h.size();
      val = h.substr(i + 1, end - i - 1);
      i = end + 1;
    } else {
      size_t end = h.find(',', i);
      if (end == std::string::npos) end = h.size();
      val = h.substr(i, end - i);
      i = end;
    }
    out[key] = val;
  }
  return out;
}

struct Response {
  long status = 0;
  std::string body;                            // for small responses
  std::map<std::string, std::string> headers;  // lower-case names
};

// Where a response body goes: memory (capped) or a file, hashed on the way.
struct BodySink {
  std::string* mem = nullptr;
  size_t mem_cap = kMaxManifest;
  int fd = -1;
  Sha256* hash = nullptr;
  uint64_t written = 0;
  uint64_t max_bytes = UINT64_MAX;
  bool overflow = false;
  bool write_error = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* ctx) {
  auto* s = static_cast<BodySink*>(ctx);
  size_t len = size * n;
  if (s->written + len > s->max_bytes || (s->mem && s->mem->size() + len > s->mem_cap)) {
    s->overflow = true;
    return 0;
  }
  if (s->mem) s->mem->append(data, len);
  if (s->fd >= 0) {
    for (size_t off = 0; off < len;) {
      ssize_t w = write(s->fd, data + off, len - off);
      if (w < 0) {
        if (errno == EINTR) continue;
        s->write_error = true;
        return 0;
      }
      off += static_cast<size_t>(w);
    }
  }
  if (s->hash) s->hash->Update(data, len);
  s->written += len;
  return len;
}

size_t OnHeader(char* data, size_t size, size_t n, void* ctx) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(ctx);
  std::string line(data, size * n);
  // A redirect starts a new response: keep only the final one's headers.
  if (line.rfind("HTTP/", 0) == 0) headers->clear();
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string k = line.substr(0, colon), v = line.substr(colon + 1);
    for (auto& c : k) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(0, 1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
    (*headers)[k] = v;
  }
  return size * n;
}

class Session {
 public:
  Session(const ImageReference& ref, const RegistryOptions& opts) : ref_(ref), opts_(opts) {
    GlobalInit();
    scheme_ = "https";
  }

  // GET /v2/<repo>/<what> with auth handling; body to `sink`.
  Result<Response> Get(const std::string& path, const std::string& accept, BodySink* sink) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      Response resp = WARREN_TRY(Perform(BaseUrl() + path, accept, auth_header_, sink));
      if (resp.status != 401) return resp;
      if (attempt == 2) break;
      std::string challenge = resp.headers["www-authenticate"];
      WARREN_RETURN_IF_ERROR(Authenticate(challenge));
      ResetSink(sink);
    }
    return Status(Code::kUnauthorized, "pull", ref_.ToString(),
                  "the registry refused the credentials (set WARREN_REGISTRY_AUTH=user:password)");
  }

 private:
  std::string BaseUrl() const { return scheme_ + "://" + ref_.registry + "/v2/"; }

  static void ResetSink(BodySink* s) {
    if (s->mem) s->mem->clear();
    if (s->fd >= 0) {
      (void)!ftruncate(s->fd, 0);
      lseek(s->fd, 0, SEEK_SET);
    }
    s->written = 0;
  }

  Result<Response> Perform(const std::string& url, const std::string& accept,
                           const std::string& auth, BodySink* sink) {
    auto r = PerformOnce(url, accept, auth, sink);
    // Loopback (or explicitly insecure) registries may speak plain HTTP: fall back once, but
    // only when the TLS handshake failed because the other side does not speak TLS. A
    // certificate that fails verification is reported, never silently downgraded.
    if (!r.ok() && last_curl_code_ == CURLE_SSL_CONNECT_ERROR && scheme_ == "https" &&
        (opts_.insecure || IsLoopbackHost(ref_.registry)) &&
        url.rfind("https://" + ref_.registry, 0) == 0) {
      scheme_ = "http";
      ResetSink(sink);
      return PerformOnce("http" + url.substr(5), accept, auth, sink);
    }
    return r;
  }

  Result<Response> PerformOnce(const std::string& url, const std::string& accept,
                               const std::string& auth, BodySink* sink) {
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> c(curl_easy_init(), curl_easy_cleanup);
    if (!c) return Internal("curl_easy_init", url, "out of memory");
    Response resp;
    curl_slist* hdrs = nullptr;
    if (!accept.empty()) hdrs = curl_slist_append(hdrs, ("Accept: " + accept).c_str());
    if (!auth.empty()) hdrs = curl_slist_append(hdrs, ("Authorization: " + auth).c_str());
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> hold(hdrs, curl_slist_free_all);
    curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, hdrs);
    // Blob GETs redirect to storage; libcurl drops our Authorization header on another host.
    curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c.get(), CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c.get(), CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c.get(), CURLOPT_USERAGENT, "warren/0.1");
    curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT, 30L);
    // A stalled transfer (under 1 KiB/s for a minute) fails instead of hanging the build.
    curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    if (!opts_.ca_file.empty()) curl_easy_setopt(c.get(), CURLOPT_CAINFO, opts_.ca_file.c_str());
    if (opts_.insecure) {
      curl_easy_setopt(c.get(), CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(c.get(), CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(c.get(), CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c.get(), CURLOPT_HEADERDATA, &resp.headers);
    char err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, err);
    CURLcode rc = curl_easy_perform(c.get());
    last_curl_code_ = rc;
    if (sink->overflow) return Invalid("response larger than expected", url);
    if (sink->write_error) return ErrnoStatus("write blob", url);
    if (rc != CURLE_OK) {
      std::string why =
          std::string(curl_easy_strerror(rc)) + (err[0] ? std::string(": ") + err : "");
      if (rc == CURLE_PEER_FAILED_VERIFICATION)
        why += " (give the registry's CA with --registry-ca or $WARREN_REGISTRY_CA)";
      return Status(Code::kUnavailable, "GET", url, why);
    }
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &resp.status);
    return resp;
  }

  // Answers a 401 challenge: Basic uses the credentials; Bearer fetches a token.
  Status Authenticate(const std::string& challenge) {
    std::string scheme;
    auto params = ParseChallenge(challenge, &scheme);
    if (scheme == "basic") {
      if (opts_.credentials.empty())
        return Status(Code::kUnauthorized, "pull", ref_.ToString(),
                      "the registry needs credentials (set WARREN_REGISTRY_AUTH=user:password)");
      auth_header_ = "Basic " + Base64(opts_.credentials);
      return Status::Ok();
    }
    if (scheme != "bearer" || params["realm"].empty())
      return Status(Code::kUnauthorized, "pull", ref_.ToString(),
                    "unsupported authentication challenge `" + challenge + "`");
    std::string url = params["realm"];
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> esc(curl_easy_init(), curl_easy_cleanup);
    auto enc = [&](const std::string& s) {
      char* e = curl_easy_escape(esc.get(), s.c_str(), static_cast<int>(s.size()));
      std::string out = e ? e : "";
      curl_free(e);
      return out;
    };
    std::string scope =
        params.count("scope") ? params["scope"] : "repository:" + ref_.repository + ":pull";
    url += (url.find('?') == std::string::npos ? "?" : "&") + std::string("scope=") + enc(scope);
    if (params.count("service")) url += "&service=" + enc(params["service"]);
    std::string body;
    BodySink sink;
    sink.mem = &body;
    std::string basic = opts_.credentials.empty() ? "" : "Basic " + Base64(opts_.credentials);
    Response r = WARREN_TRY(PerformOnce(url, "application/json", basic, &sink));
    if (r.status == 401 || r.status == 403)
      return Status(Code::kUnauthorized, "get registry token", params["realm"],
                    "refused (HTTP " + std::to_string(r.status) + ")");
    if (r.status != 200)
      return Status(Code::kUnavailable, "get registry token", params["realm"],
                    "HTTP " + std::to_string(r.status));
    json j = json::parse(body, nullptr, false);
    std::string token = j.is_object() ? j.value("token", j.value("access_token", "")) : "";
    if (token.empty()) return Invalid("token response without a token", params["realm"]);
    auth_header_ = "Bearer " + token;
    return Status::Ok();
  }

  static std::string Base64(const std::string& in) {
    static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
      unsigned v =
          (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
      out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
    }
    if (i + 1 == in.size()) {
      unsigned v = (unsigned char)in[i] << 16;
      out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
    } else if (i + 2 == in.size()) {
      unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
      out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
    }
    return out;
  }

  ImageReference ref_;
  RegistryOptions opts_;
  std::string scheme_;
  std::string auth_header_;
  CURLcode last_curl_code_ = CURLE_OK;
};

std::string HttpError(const Response& r) {
  json j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("errors") && j["errors"].is_array() && !j["errors"].empty() &&
      j["errors"][0].is_object())
    return j["errors"][0].value("code", "") + ": " + j["errors"][0].value("message", "");
  return "HTTP " + std::to_string(r.status);
}

Status CheckDigestFormat(const std::string& d) {
  if (d.rfind("sha256:", 0) != 0 || d.size() != 71)
    return Invalid("unsupported digest `" + d + "`");
  for (char c : d.substr(7))
    if (!isxdigit(static_cast<unsigned char>(c)) || isupper(static_cast<unsigned char>(c)))
      return Invalid("malformed digest `" + d + "`");
  return Status::Ok();
}

// Fetches a manifest (by tag or digest); checks it against `digest` when given.
Result<std::pair<json, std::string>> FetchManifest(Session& s, const ImageReference& ref,
                                                   const std::string& reference,
                                                   const std::string& digest, std::string* raw) {
  BodySink sink;
  sink.mem = raw;
  Response r =
      WARREN_TRY(s.Get(ref.repository + "/manifests/" + reference, kManifestAccept, &sink));
  r.body = *raw;
  if (r.status == 404) return NotFound("image manifest `" + reference + "`", ref.ToString());
  if (r.status != 200)
    return Status(Code::kUnavailable, "get manifest", ref.ToString(), HttpError(r));
  std::string actual = "sha256:" + Sha256Hex(*raw);
  if (!digest.empty() && actual != digest)
    return Invalid("manifest digest mismatch: got " + actual + ", want " + digest, ref.ToString());
  json j = json::parse(*raw, nullptr, false);
  if (!j.is_object()) return Invalid("malformed manifest", ref.ToString());
  std::string mt = j.value("mediaType", r.headers["content-type"]);
  if (j.value("schemaVersion", 0) == 1)
    return Invalid("schema 1 manifests are obsolete and not supported", ref.ToString());
  return std::make_pair(j, actual);
}

Status WriteFileAtomic(const std::string& path, const std::string& data) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return ErrnoStatus("create", path);
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return ErrnoStatus("write", path);
  return Status::Ok();
}

Status StoreJsonBlob(const std::string& dir, const std::string& digest, const std::string& raw) {
  return WriteFileAtomic(dir + "/blobs/sha256/" + digest.substr(7), raw);
}

Status FetchBlob(Session& s, const ImageReference& ref, const std::string& dir, const json& desc,
                 const RegistryOptions& opts, const std::string& label) {
  std::string digest = desc.value("digest", "");
  WARREN_RETURN_IF_ERROR(CheckDigestFormat(digest));
  int64_t size = desc.value("size", int64_t{-1});
  std::string path = dir + "/blobs/sha256/" + digest.substr(7);
  if (access(path.c_str(), F_OK) == 0) return Status::Ok();  // the same blob twice
  std::string part = path + ".partial";
  UniqueFd fd(open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return ErrnoStatus("create", part);
  Sha256 hash;
  BodySink sink;
  sink.fd = fd.get();
  sink.hash = &hash;
  if (size >= 0) sink.max_bytes = static_cast<uint64_t>(size);
  auto t0 = std::chrono::steady_clock::now();
  Response r = WARREN_TRY(s.Get(ref.repository + "/blobs/" + digest, "", &sink));
  if (r.status != 200) {
    unlink(part.c_str());
    return Status(r.status == 404 ? Code::kNotFound : Code::kUnavailable, "get blob " + digest,
                  ref.ToString(), "HTTP " + std::to_string(r.status));
  }
  std::string got = "sha256:" + hash.HexDigest();
  if (got != digest || (size >= 0 && sink.written != static_cast<uint64_t>(size))) {
    unlink(part.c_str());
    return Invalid("blob " + digest + " arrived corrupted (got " + got + ", " +
                       std::to_string(sink.written) + " bytes)",
                   ref.ToString());
  }
  if (rename(part.c_str(), path.c_str()) != 0) return ErrnoStatus("rename", path);
  if (opts.progress) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char line[256];
    snprintf(line, sizeof line, "%s %.19s  %.1f MB in %.1f s", label.c_str(), digest.c_str(),
             sink.written / 1e6, secs);
    opts.progress(line);
  }
  return Status::Ok();
}

}  // namespace

std::string ImageReference::ToString() const {
  std::string s = registry + "/" + repository;
  if (!tag.empty()) s += ":" + tag;
  if (!digest.empty()) s += "@" + digest;
  return s;
}

Result<ImageReference> ParseImageReference(const std::string& in) {
  ImageReference r;
  std::string rest = in;
  size_t at = rest.find('@');
  if (at != std::string::npos) {
    r.digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    WARREN_RETURN_IF_ERROR(CheckDigestFormat(r.digest).Context("parse image reference " + in));
  }
  size_t slash = rest.find('/');
  std::string first = rest.substr(0, slash);
  if (slash != std::string::npos &&
      (first.find('.') != std::string::npos || first.find(':') != std::string::npos ||
       first == "localhost")) {
    r.registry = first;
    rest = rest.substr(slash + 1);
  } else {
    r.registry = "registry-1.docker.io";
    if (rest.find('/') == std::string::npos) rest = "library/" + rest;
  }
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find('/', colon) == std::string::npos) {
    r.tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  if (r.tag.empty() && r.digest.empty()) r.tag = "latest";
  r.repository = rest;
  if (rest.empty()) return Invalid("image reference without a repository", in);
  // Each path component: [a-z0-9]+ separated by single `.`, `_`, `__` or `-`s (distribution's
  // grammar, simplified): no empty components, none starting or ending with a separator.
  size_t i = 0;
  while (i <= rest.size()) {
    size_t j = rest.find('/', i);
    if (j == std::string::npos) j = rest.size();
    std::string comp = rest.substr(i, j - i);
    bool ok = !comp.empty() && isalnum(static_cast<unsigned char>(comp.front())) &&
              isalnum(static_cast<unsigned char>(comp.back()));
    for (char c : comp)
      if (!(islower(static_cast<unsigned char>(c)) || isdigit(static_cast<unsigned char>(c)) ||
            c == '.' || c == '_' || c == '-'))
        ok = false;
    if (!ok)
      return Invalid(
          "repository names are lower-case letters and digits, with . _ - between, and / between "
          "parts",
          in);
    i = j + 1;
  }
  if (r.registry.empty() || r.registry[0] == '.' || r.registry[0] == '-')
    return Invalid("bad registry host", in);
  for (char c : r.tag)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return Invalid("bad tag", in);
  return r;
}

Result<OciImage> PullImage(const ImageReference& ref, const std::string& dir,
                           const RegistryOptions& opts) {
  if (mkdir((dir + "/blobs").c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", dir);
  if (mkdir((dir + "/blobs/sha256").c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", dir);
  Session s(ref, opts);
  auto say = [&](const std::string& m) {
    if (opts.progress) opts.progress(m);
  };
  say("resolving " + ref.ToString());
  std::string raw;
  auto [m, mdigest] = WARREN_TRY(
      FetchManifest(s, ref, ref.digest.empty() ? ref.tag : ref.digest, ref.digest, &raw));
  WARREN_RETURN_IF_ERROR(StoreJsonBlob(dir, mdigest, raw));
  json top{{"mediaType", m.value("mediaType", "")}, {"digest", mdigest}, {"size", raw.size()}};
  // An index: store it too, then the manifest chosen for this platform.
  if (IsIndexMediaType(m.value("mediaType", "")) ||
      (m.contains("manifests") && !m.contains("layers"))) {
    json d = WARREN_TRY(ChoosePlatform(m, ref.ToString()));
    std::string d_digest = d.value("digest", "");
    WARREN_RETURN_IF_ERROR(CheckDigestFormat(d_digest));
    say("platform linux/" + HostOciArchitecture() + ": " + d_digest.substr(0, 19));
    std::string raw2;
    auto [m2, digest2] = WARREN_TRY(FetchManifest(s, ref, d_digest, d_digest, &raw2));
    WARREN_RETURN_IF_ERROR(StoreJsonBlob(dir, digest2, raw2));
    m = m2;
  }
  if (!m.contains("layers") || !m["layers"].is_array())
    return Invalid("manifest has no layers", ref.ToString());
  if (m.contains("config"))
    WARREN_RETURN_IF_ERROR(FetchBlob(s, ref, dir, m["config"], {}, "config"));
  size_t n = m["layers"].size(), i = 0;
  for (const auto& l : m["layers"]) {
    ++i;
    WARREN_RETURN_IF_ERROR(
        FetchBlob(s, ref, dir, l, opts, "layer " + std::to_string(i) + "/" + std::to_string(n)));
  }
  WARREN_RETURN_IF_ERROR(WriteFileAtomic(dir + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})"));
  json index{{"schemaVersion", 2}, {"manifests", json::array({top})}};
  WARREN_RETURN_IF_ERROR(WriteFileAtomic(dir + "/index.json", index.dump()));
  return ReadOciDir(dir, "");
}

}  // namespace warren::image
