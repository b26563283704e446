#include "image/builders.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "image/oci_flatten.h"
#include "image/tar_create.h"

namespace warren::image {
namespace {

void Say(const BuildSource& s, const std::string& m) {
  if (s.progress) s.progress(m);
}

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool Exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

Result<BuiltTar> FromDir(const BuildSource& s, const std::string& work) {
  if (!IsDir(s.from_dir)) return NotFound("directory", s.from_dir);
  BuiltTar out{work + "/rootfs.tar", "dir:" + s.from_dir};
  UniqueFd fd(open(out.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return ErrnoStatus("create", out.path);
  Say(s, "packing " + s.from_dir);
  WARREN_RETURN_IF_ERROR(WriteTarOfDir(s.from_dir, [&](const void* b, size_t n) -> Status {
    const char* p = static_cast<const char*>(b);
    while (n > 0) {
      ssize_t w = write(fd.get(), p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", out.path);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }));
  return out;
}

// Where an OCI source lives: a path (optionally PATH:NAME) or a registry reference.
struct OciLocation {
  std::string path, name;
  bool registry = false;
};

OciLocation LocateOci(const std::string& spec) {
  std::string s = spec;
  // skopeo-style transport prefixes are accepted for convenience.
  for (const char* p : {"oci:", "oci-archive:", "docker-archive:"})
    if (s.rfind(p, 0) == 0) {
      s = s.substr(strlen(p));
      break;
    }
  if (s.rfind("docker://", 0) == 0) return {s.substr(9), "", true};
  if (Exists(s)) return {s, "", false};
  // Something written as a path is a path: never look it up in a registry.
  const bool path_like = s[0] == '/' || s[0] == '.' || s[0] == '~';
  size_t colon = s.find(':');
  // PATH:NAME (the name may itself hold a colon: REPO:TAG).
  while (colon != std::string::npos) {
    if (colon > 0 && Exists(s.substr(0, colon)))
      return {s.substr(0, colon), s.substr(colon + 1), false};
    colon = s.find(':', colon + 1);
  }
  return {s, "", !path_like};
}

Result<BuiltTar> FromOci(const BuildSource& s, const std::string& work) {
  OciLocation loc = LocateOci(s.from_oci);
  OciImage img;
  std::string source;
  if (loc.registry) {
    ImageReference ref = WARREN_TRY(ParseImageReference(loc.path));
    std::string dir = work + "/pull";
    if (mkdir(dir.c_str(), 0700) != 0) return ErrnoStatus("mkdir", dir);
    img = WARREN_TRY(PullImage(ref, dir, s.registry));
    source = "oci:" + ref.ToString();
  } else {
    if (!Exists(loc.path)) return NotFound("OCI image (no such file or directory)", loc.path);
    std::string dir = loc.path;
    if (!IsDir(dir)) {
      dir = work + "/unpacked";
      if (mkdir(dir.c_str(), 0700) != 0) return ErrnoStatus("mkdir", dir);
      Say(s, "unpacking " + loc.path);
      Status st = UnpackImageArchive(loc.path, dir);
      if (!st.ok()) return Status(st.code(), "read image archive", loc.path, st.message());
    }
    auto read = ReadOciDir(dir, loc.name);
    // Errors about the scratch copy of an archive name the archive.
    if (!read.ok() && dir != loc.path) {
      const Status& st = read.status();
      std::string obj =
          st.object().rfind(dir, 0) == 0 ? loc.path + st.object().substr(dir.size()) : loc.path;
      return Status(st.code(), st.op(), obj, st.message());
    }
    img = WARREN_TRY(std::move(read));
    source = "oci:" + loc.path + (loc.name.empty() ? "" : ":" + loc.name);
  }
  if (!img.manifest_digest.empty()) source += "@" + img.manifest_digest;
  BuiltTar out{work + "/rootfs.tar", source};
  size_t n = img.layers.size();
  FlattenStats st = WARREN_TRY(FlattenLayers(img.layers, out.path, [&](size_t i) {
    Say(s, "flattening layer " + std::to_string(n - i) + "/" + std::to_string(n) + " (top first)");
  }));
  Say(s, "flattened " + std::to_string(n) + " layers: " + std::to_string(st.entries) +
             " entries, " + std::to_string(st.bytes / 1000000) + " MB, " +
             std::to_string(st.hidden) + " hidden by upper layers");
  return out;
}

// A desktop image: the X servers the agent starts (xvfb in a container or microVM; Xorg with
// evdev input on a whole VM's display device), Debian's default window manager for it (openbox:
// x-window-manager; right click on the desktop opens its menu, whose first entry is the
// terminal), a terminal (xterm: x-terminal-emulator) with its fonts, a text editor (xedit, in
// x11-apps) and the X tools a script wants (xwd, xdpyinfo); no xdotool: the agent does input
// itself, or QEMU does.
const char* const kDesktopPackages[] = {
    "xvfb",     "xserver-xorg-core", "xserver-xorg-input-evdev", "openbox", "xterm", "xfonts-base",
    "x11-apps", "x11-utils",         "fonts-dejavu-core"};

Result<BuiltTar> FromDebian(const BuildSource& s, const std::string& work) {
  for (char c : s.debian_suite)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-')
      return Invalid("a Debian suite is a name like bookworm", s.debian_suite);
  BuiltTar out{work + "/rootfs.tar", "debian:" + s.debian_suite};
  // mmdebstrap's default cleanup already drops apt's package lists and caches.
  std::vector<std::string> argv = {"mmdebstrap", "--variant=apt", "--format=tar"};
  std::string include;
  std::vector<std::string> packages = s.packages;
  if (s.desktop)
    packages.insert(packages.begin(), std::begin(kDesktopPackages), std::end(kDesktopPackages));
  for (const auto& p : packages) {
    for (char c : p)
      if (!isalnum(static_cast<unsigned char>(c)) && !strchr("+-.:=~", c))
        return Invalid("bad Debian package name `" + p + "`");
    include += (include.empty() ? "" : ",") + p;
  }
  if (!include.empty()) {
    argv.push_back("--include=" + include);
    out.source += "+" + include;
  }
  if (s.desktop) {
    // A browser added to a desktop (--packages chromium) runs as the sandbox's root, where
    // Chromium's own sandbox cannot start (it needs new user namespaces or a setuid helper,
    // neither of which a sandbox has) and refuses to run: the sandbox is the boundary, so its
    // launcher (/usr/bin/chromium, which sources /etc/chromium.d) runs it without.
    argv.push_back(
        "--customize-hook=mkdir -p \"$1/etc/chromium.d\" && printf '%s\\n' "
        "'# warren: the sandbox is the boundary; chromium cannot start its own in it' "
        "'export CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --no-sandbox\"' "
        "> \"$1/etc/chromium.d/warren-sandbox\"");
  }
  argv.push_back(s.debian_suite);
  argv.push_back(out.path);
  if (!s.debian_mirror.empty()) argv.push_back(s.debian_mirror);
  Say(s, "running mmdebstrap " + s.debian_suite + (include.empty() ? "" : " with " + include));
  auto run = RunProgramShowingOutput(argv);
  if (!run.ok()) return run.status().Context("build Debian image (is mmdebstrap installed?)");
  int rc = *run;
  if (rc != 0)
    return Status(Code::kInvalid, "mmdebstrap", s.debian_suite,
                  "failed with exit code " + std::to_string(rc) + " (see its output above)");
  return out;
}

}  // namespace

Result<BuiltTar> BuildRootfsTar(const BuildSource& s, const std::string& work) {
  int given =
      !s.from_dir.empty() + !s.from_tar.empty() + !s.from_oci.empty() + !s.debian_suite.empty();
  if (given != 1)
    return Invalid("give exactly one of --from-dir, --from-tar, --from-oci, --debian");
  if ((!s.packages.empty() || s.desktop) && s.debian_suite.empty())
    return Invalid("--packages goes with --debian, and so does --desktop");
  if (!s.from_dir.empty()) return FromDir(s, work);
  if (!s.from_tar.empty()) {
    if (!Exists(s.from_tar)) return NotFound("file", s.from_tar);
    return BuiltTar{s.from_tar, "tar:" + s.from_tar};
  }
  if (!s.from_oci.empty()) return FromOci(s, work);
  return FromDebian(s, work);
}

}  // namespace warren::image
