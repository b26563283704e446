// warren image build NAME:TAG (--from-dir DIR | --from-tar FILE) [--kind K] | ls | rm NAME:TAG
#include <fcntl.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/unique_fd.h"
#include "cli/common.h"
#include "image/tar_create.h"

namespace warren::cli {
namespace {

int Build(const std::string& ref, const std::string& dir, const std::string& tar,
          const std::string& kind, bool oci, bool debian) {
  size_t colon = ref.rfind(':');
  if (colon == std::string::npos) return Fail("image build", "the image name must be NAME:TAG");
  if (oci || debian)
    return Fail("image build " + ref, "--from-oci and --debian are not available yet");
  if (dir.empty() == tar.empty()) return Fail("image build " + ref, "give one of --from-dir or --from-tar");
  std::string upload = tar;
  Cleanup rm_tmp;
  if (!dir.empty()) {
    // Tar the directory into a temporary file, then upload it (the server builds the EROFS
    // image: owners and modes are kept as they are on disk).
    char tmpl[] = "/var/tmp/warren-build-XXXXXX";
    UniqueFd fd(mkstemp(tmpl));
    if (!fd) return Fail(ErrnoStatus("mkstemp", tmpl));
    upload = tmpl;
    rm_tmp = Cleanup([upload] { unlink(upload.c_str()); });
    fprintf(stderr, "packing %s ...\n", dir.c_str());
    Status st = image::WriteTarOfDir(dir, [&](const void* b, size_t n) -> Status {
      const char* p = static_cast<const char*>(b);
      while (n > 0) {
        ssize_t w = write(fd.get(), p, n);
        if (w < 0) return ErrnoStatus("write", upload);
        p += w;
        n -= static_cast<size_t>(w);
      }
      return Status::Ok();
    });
    if (!st.ok()) return Fail(st.Context("image build " + ref));
  }
  fprintf(stderr, "uploading and building %s ...\n", ref.c_str());
  auto r = Client().UploadFile("POST",
                               "/v1/layers?name=" + client::UrlEncode(ref.substr(0, colon)) +
                                   "&tag=" + client::UrlEncode(ref.substr(colon + 1)) +
                                   "&kind=" + client::UrlEncode(kind),
                               upload, "application/x-tar");
  if (!r.ok()) return Fail(r.status().Context("image build " + ref));
  auto j = client::JsonOf(*r, "image build " + ref);
  if (!j.ok()) return Fail(j.status());
  printf("%s %s\n", ref.c_str(), (*j)["digest"].get<std::string>().c_str());
  return 0;
}

}  // namespace

void AddImage(CLI::App& app) {
  auto* image = app.add_subcommand("image", "build, list and remove images (layers)");
  image->require_subcommand(1);

  auto* build = image->add_subcommand("build", "build an image");
  auto ref = std::make_shared<std::string>(), dir = std::make_shared<std::string>(),
       tar = std::make_shared<std::string>(), kind = std::make_shared<std::string>("base"),
       oci = std::make_shared<std::string>(), debian = std::make_shared<std::string>(),
       packages = std::make_shared<std::string>();
  build->add_option("ref", *ref, "NAME:TAG")->required();
  build->add_option("--from-dir", *dir, "a root directory");
  build->add_option("--from-tar", *tar, "a tar archive (plain, gzip, zstd, xz)");
  build->add_option("--from-oci", *oci, "an OCI image (not available yet)");
  build->add_option("--debian", *debian, "a Debian suite (not available yet)");
  build->add_option("--packages", *packages, "Debian packages, comma-separated");
  build->add_option("--kind", *kind, "base|workspace|tool");
  build->callback([=] {
    ExitCode() = Build(*ref, *dir, *tar, *kind, !oci->empty(), !debian->empty());
  });

  auto* ls = image->add_subcommand("ls", "list images");
  ls->callback([] {
    auto r = Client().Request("GET", "/v1/layers");
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "list images");
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    printf("%-32s %-10s %12s  %-19s  %s\n", "NAME:TAG", "KIND", "SIZE", "DIGEST", "CREATED");
    for (const auto& l : (*j)["layers"])
      printf("%-32s %-10s %12llu  %-19.19s  %s\n", l.value("ref", "").c_str(),
             l.value("kind", "").c_str(), static_cast<unsigned long long>(l.value("size", 0ull)),
             l.value("digest", "").c_str(), l.value("created_at", "").c_str());
  });

  auto* rm = image->add_subcommand("rm", "remove an image name (the blob goes when unused)");
  auto rm_ref = std::make_shared<std::string>();
  rm->add_option("ref", *rm_ref, "NAME:TAG")->required();
  rm->callback([rm_ref] {
    auto r = Client().Request("DELETE", "/v1/layers/" + client::UrlEncode(*rm_ref));
    Status st = r.ok() ? client::ToStatus(*r, "remove image " + *rm_ref) : r.status();
    if (!st.ok()) ExitCode() = Fail(st);
  });
}

}  // namespace warren::cli
