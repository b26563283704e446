// warren image build NAME:TAG (--from-dir DIR | --from-tar FILE | --from-oci SRC |
//                               --debian SUITE [--packages a,b]) [--kind K] | ls | rm NAME:TAG
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "base/cleanup.h"
#include "cli/common.h"
#include "image/builders.h"
#include "image/tar_extract.h"

namespace warren::cli {
namespace {

// On SIGINT/SIGTERM: remove `dir` (rm -rf in a vforked child: the handler may only make
// async-signal-safe calls, and vfork/execve/waitpid are), then die of the signal as usual.
const char* g_scratch = nullptr;
void RemoveScratchAndDie(int sig) {
  if (g_scratch) {
    pid_t pid = vfork();
    if (pid == 0) {
      execl("/bin/rm", "rm", "-rf", "--", g_scratch, static_cast<char*>(nullptr));
      _exit(127);
    }
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void RemoveOnSignal(const char* dir) {
  g_scratch = dir;
  struct sigaction sa {};
  sa.sa_handler = RemoveScratchAndDie;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

// Registry settings come from the environment so scripts need no extra flags.
image::RegistryOptions RegistryFromEnv(const std::string& ca, bool insecure) {
  image::RegistryOptions o;
  o.ca_file = ca.empty() && getenv("WARREN_REGISTRY_CA") ? getenv("WARREN_REGISTRY_CA") : ca;
  o.insecure = insecure || (getenv("WARREN_REGISTRY_INSECURE") &&
                            std::string(getenv("WARREN_REGISTRY_INSECURE")) == "1");
  if (const char* a = getenv("WARREN_REGISTRY_AUTH")) o.credentials = a;
  return o;
}

std::string HumanSize(uint64_t n) {
  char b[32];
  if (n >= (1ull << 30))
    snprintf(b, sizeof b, "%.1fG", n / double(1ull << 30));
  else if (n >= (1ull << 20))
    snprintf(b, sizeof b, "%.1fM", n / double(1ull << 20));
  else if (n >= 1024)
    snprintf(b, sizeof b, "%.1fK", n / 1024.0);
  else
    snprintf(b, sizeof b, "%llu", static_cast<unsigned long long>(n));
  return b;
}

int Build(const std::string& ref, image::BuildSource src, const std::string& kind, bool as_json) {
  size_t colon = ref.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == ref.size())
    return Fail("image build", "the image name must be NAME:TAG");
  const std::string what = "image build " + ref;
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  src.progress = [&](const std::string& m) {
    fprintf(stderr, "[%6.1fs] %s\n", elapsed(), m.c_str());
  };
  // Scratch space on a real disk (tmpfs may be small): removed whatever happens.
  static char tmpl[] = "/var/tmp/warren-build-XXXXXX";
  if (!mkdtemp(tmpl)) return Fail(ErrnoStatus("mkdtemp", tmpl).Context(what));
  std::string work = tmpl;
  Cleanup rm_work([work] { (void)image::RemoveTree(work); });
  // Ctrl-C in the middle of a build must not leave a copy of the whole tree behind.
  RemoveOnSignal(tmpl);
  auto built = image::BuildRootfsTar(src, work);
  if (!built.ok()) return Fail(built.status().Context(what));
  src.progress("uploading to " + ServerUrl() + " (the server writes the EROFS layer)");
  std::string source = built->source.size() > 512 ? built->source.substr(0, 512) : built->source;
  auto r = Client().UploadFile("POST",
                               "/v1/layers?name=" + client::UrlEncode(ref.substr(0, colon)) +
                                   "&tag=" + client::UrlEncode(ref.substr(colon + 1)) + "&kind=" +
                                   client::UrlEncode(kind) + "&source=" + client::UrlEncode(source),
                               built->path, "application/x-tar");
  if (!r.ok()) return Fail(r.status().Context(what));
  auto j = client::JsonOf(*r, what);
  if (!j.ok()) return Fail(j.status());
  src.progress("done: " + std::to_string((*j).value("size", 0ull) / 1000000) + " MB layer");
  if (as_json)
    printf("%s\n", j->dump(2).c_str());
  else
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
  build->add_option("--from-oci", *oci,
                    "an OCI layout dir or docker-save/OCI archive (PATH or PATH:NAME), or a "
                    "registry reference (HOST/REPO:TAG)");
  build->add_option("--debian", *debian, "a Debian suite, built with mmdebstrap (e.g. bookworm)");
  build->add_option("--packages", *packages, "Debian packages to add, comma-separated");
  auto desktop = std::make_shared<bool>(false);
  build->add_flag("--desktop", *desktop,
                  "with --debian: a desktop (Xvfb, openbox, xterm, xedit) for --display sandboxes");
  build->add_option("--kind", *kind, "base|workspace|tool");
  auto ca = std::make_shared<std::string>(), mirror = std::make_shared<std::string>();
  auto insecure = std::make_shared<bool>(false);
  build->add_option("--registry-ca", *ca, "CA bundle for the registry (or $WARREN_REGISTRY_CA)");
  build->add_flag("--insecure-registry", *insecure,
                  "allow plain HTTP and unverified TLS (loopback registries may use HTTP anyway)");
  build->add_option("--debian-mirror", *mirror, "Debian mirror URL (or $WARREN_DEBIAN_MIRROR)");
  auto build_json = std::make_shared<bool>(false);
  build->add_flag("--json", *build_json,
                  "print the stored layer's JSON instead of NAME:TAG DIGEST");
  build->callback([=] {
    image::BuildSource src;
    src.from_dir = *dir;
    src.from_tar = *tar;
    src.from_oci = *oci;
    src.debian_suite = *debian;
    src.packages = SplitList(*packages);
    src.desktop = *desktop;
    src.debian_mirror = !mirror->empty()                 ? *mirror
                        : getenv("WARREN_DEBIAN_MIRROR") ? getenv("WARREN_DEBIAN_MIRROR")
                                                         : "";
    src.registry = RegistryFromEnv(*ca, *insecure);
    ExitCode() = Build(*ref, std::move(src), *kind, *build_json);
  });

  auto* ls = image->add_subcommand("ls", "list images");
  auto ls_json = std::make_shared<bool>(false);
  ls->add_flag("--json", *ls_json, "print the API's JSON");
  ls->callback([ls_json] {
    auto r = Client().Request("GET", "/v1/layers");
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "list images");
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    if (*ls_json) return void(printf("%s\n", j->dump(2).c_str()));
    printf("%-32s %-9s %10s  %-19s  %-24s  %s\n", "NAME:TAG", "KIND", "SIZE", "DIGEST", "CREATED",
           "SOURCE");
    for (const auto& l : (*j)["layers"])
      printf("%-32s %-9s %10s  %-19.19s  %-24s  %s\n", l.value("ref", "").c_str(),
             l.value("kind", "").c_str(), HumanSize(l.value("size", 0ull)).c_str(),
             l.value("digest", "").c_str(), l.value("created_at", "").c_str(),
             l.value("source", "").c_str());
  });

  auto* inspect = image->add_subcommand(
      "inspect", "show an image: its record, format and what nodes fetched of it (JSON)");
  auto inspect_ref = std::make_shared<std::string>();
  inspect->add_option("ref", *inspect_ref, "NAME:TAG")->required();
  inspect->callback([inspect_ref] {
    auto r = Client().Request("GET", "/v1/layers/" + client::UrlEncode(*inspect_ref));
    if (!r.ok()) return void(ExitCode() = Fail(r.status()));
    auto j = client::JsonOf(*r, "inspect image " + *inspect_ref);
    if (!j.ok()) return void(ExitCode() = Fail(j.status()));
    printf("%s\n", j->dump(2).c_str());
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
