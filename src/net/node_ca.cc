#include "net/node_ca.h"

#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <sstream>

namespace warren::net {

namespace {

constexpr const char* kSubjectCn = "Warren egress proxy CA";
constexpr long kCaDays = 3650;
constexpr long kLeafDays = 7;
constexpr size_t kMaxLeaves = 4096;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

Result<std::string> ReadWhole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ErrnoStatus("open", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Written whole or not at all: a temporary file renamed over the old one.
Status WriteWhole(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return ErrnoStatus("open", tmp);
  bool ok =
      write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) && fsync(fd) == 0;
  int err = errno;
  close(fd);
  if (!ok) {
    unlink(tmp.c_str());
    return ErrnoStatus("write", tmp, err);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename", tmp);
  return Status::Ok();
}

Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext)
    return Internal("certificate extension", OBJ_nid2sn(nid), value + ": " + OpenSslError());
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (!ok) return Internal("certificate extension", OBJ_nid2sn(nid), OpenSslError());
  return Status::Ok();
}

Status RandomSerial(X509* cert) {
  BIGNUM* bn = BN_new();
  bool ok = bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) &&
            BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert));
  BN_free(bn);
  return ok ? Status::Ok() : Internal("certificate serial", "", OpenSslError());
}

// A certificate for `subject_cn` with `pubkey`, signed by `issuer_key` (self-signed when
// `issuer` is null), valid from an hour ago for `days`.
Result<X509Ptr> NewCert(const std::string& subject_cn, EVP_PKEY* pubkey, X509* issuer, long days) {
  X509Ptr cert(X509_new());
  if (!cert || !X509_set_version(cert.get(), 2))
    return Internal("new certificate", subject_cn, OpenSslError());
  WARREN_RETURN_IF_ERROR(RandomSerial(cert.get()));
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), days * 86400);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("Warren"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(subject_cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  if (!X509_set_pubkey(cert.get(), pubkey))
    return Internal("new certificate", subject_cn, OpenSslError());
  return cert;
}

Status Sign(X509* cert, EVP_PKEY* key, const std::string& what) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0)
    return Internal("sign certificate", what, OpenSslError());
  return Status::Ok();
}

std::string Pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// The name constraints for `list`: each host (RFC 5280: with the names under it), for
// `*.domain` only the names under it, and no IP address at all.
std::string NameConstraints(const InterceptList& list) {
  std::string v = "critical";
  for (const auto& h : list.hosts())
    v += ",permitted;DNS:" + (h.rfind("*.", 0) == 0 ? h.substr(1) : h);
  return v + ",excluded;IP:0.0.0.0/0.0.0.0,excluded;IP:::/::";
}

}  // namespace

std::string OpenSslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

InterceptList::InterceptList(std::vector<std::string> hosts) {
  for (auto& h : hosts) {
    std::string l = Lower(h);
    if (!l.empty() && std::find(hosts_.begin(), hosts_.end(), l) == hosts_.end())
      hosts_.push_back(l);
  }
  std::sort(hosts_.begin(), hosts_.end());
}

bool InterceptList::Matches(const std::string& host) const {
  for (const auto& h : hosts_) {
    if (h == host) return true;
    if (h.rfind("*.", 0) == 0) {
      std::string_view suffix = std::string_view(h).substr(1);  // ".domain"
      if (host.size() > suffix.size() &&
          host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0)
        return true;
    }
  }
  return false;
}

Result<std::unique_ptr<NodeCa>> NodeCa::Open(const std::string& dir, const InterceptList& list) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", dir);
  std::unique_ptr<NodeCa> ca(new NodeCa());
  const std::string key_path = dir + "/ca.key", cert_path = dir + "/ca.crt",
                    names_path = dir + "/ca.names";
  struct stat key_st;
  const bool have_key = stat(key_path.c_str(), &key_st) == 0;
  // Only a missing key is made anew: any other trouble reading it must not replace the key
  // every running sandbox trusts.
  if (!have_key && errno != ENOENT) return ErrnoStatus("stat", key_path);
  if (have_key) {
    auto pem = WARREN_TRY(ReadWhole(key_path));
    BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    ca->key_.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    if (!ca->key_) return Internal("read CA key", key_path, OpenSslError());
  } else {
    ca->key_.reset(EVP_EC_gen("P-256"));
    if (!ca->key_) return Internal("generate CA key", key_path, OpenSslError());
    BioPtr bio(BIO_new(BIO_s_mem()));
    PEM_write_bio_PrivateKey(bio.get(), ca->key_.get(), nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    long n = BIO_get_mem_data(bio.get(), &data);
    WARREN_RETURN_IF_ERROR(WriteWhole(key_path, std::string(data, static_cast<size_t>(n)), 0600));
  }
  // The certificate on disk serves if it was made from this key, for these hosts, and has a
  // year left; otherwise a new one (same key and subject: a sandbox holding the old one still
  // checks new leaves with it).
  std::string names;
  for (const auto& h : list.hosts()) names += h + "\n";
  auto old_names = ReadWhole(names_path);
  if (auto pem = ReadWhole(cert_path); pem.ok() && old_names.ok() && *old_names == names) {
    BioPtr bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    time_t year = time(nullptr) + 365 * 86400;
    if (cert && X509_check_private_key(cert.get(), ca->key_.get()) == 1 &&
        X509_cmp_time(X509_get0_notAfter(cert.get()), &year) > 0)
      ca->cert_ = std::move(cert);
    ERR_clear_error();
  }
  if (!ca->cert_) {
    X509Ptr cert = WARREN_TRY(NewCert(kSubjectCn, ca->key_.get(), nullptr, kCaDays));
    WARREN_RETURN_IF_ERROR(
        AddExt(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    WARREN_RETURN_IF_ERROR(
        AddExt(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
    WARREN_RETURN_IF_ERROR(AddExt(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
    if (!list.empty())
      WARREN_RETURN_IF_ERROR(
          AddExt(cert.get(), cert.get(), NID_name_constraints, NameConstraints(list)));
    WARREN_RETURN_IF_ERROR(Sign(cert.get(), ca->key_.get(), "CA"));
    WARREN_RETURN_IF_ERROR(WriteWhole(cert_path, Pem(cert.get()), 0644));
    WARREN_RETURN_IF_ERROR(WriteWhole(names_path, names, 0644));
    ca->cert_ = std::move(cert);
  }
  ca->cert_pem_ = Pem(ca->cert_.get());
  ca->leaf_key_.reset(EVP_EC_gen("P-256"));
  if (!ca->leaf_key_) return Internal("generate leaf key", dir, OpenSslError());
  return ca;
}

Result<std::pair<std::shared_ptr<X509>, EVP_PKEY*>> NodeCa::Leaf(const std::string& host) {
  // A host name's characters only: it becomes part of an extension's configuration text.
  if (host.empty() || host.size() > 253 || !std::all_of(host.begin(), host.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
      }))
    return Invalid("not a host name for a certificate", host);
  const int64_t now = time(nullptr);
  std::lock_guard lock(mu_);
  if (auto it = leaves_.find(host); it != leaves_.end() && it->second.renew_at > now)
    return std::make_pair(it->second.cert, leaf_key_.get());
  X509Ptr cert = WARREN_TRY(NewCert(host, leaf_key_.get(), cert_.get(), kLeafDays));
  WARREN_RETURN_IF_ERROR(
      AddExt(cert.get(), cert_.get(), NID_basic_constraints, "critical,CA:FALSE"));
  WARREN_RETURN_IF_ERROR(
      AddExt(cert.get(), cert_.get(), NID_key_usage, "critical,digitalSignature"));
  WARREN_RETURN_IF_ERROR(AddExt(cert.get(), cert_.get(), NID_ext_key_usage, "serverAuth"));
  WARREN_RETURN_IF_ERROR(AddExt(cert.get(), cert_.get(), NID_subject_alt_name, "DNS:" + host));
  WARREN_RETURN_IF_ERROR(
      AddExt(cert.get(), cert_.get(), NID_authority_key_identifier, "keyid:always"));
  WARREN_RETURN_IF_ERROR(Sign(cert.get(), key_.get(), host));
  if (leaves_.size() >= kMaxLeaves) leaves_.clear();
  std::shared_ptr<X509> shared(cert.release(), X509_free);
  leaves_[host] = {shared, now + (kLeafDays - 1) * 86400};
  return std::make_pair(shared, leaf_key_.get());
}

}  // namespace warren::net
