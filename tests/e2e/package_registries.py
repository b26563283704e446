"""Package registries on disk, for mirror_upstream.py to serve: npm (packuments and tarballs),
PyPI (PEP 503 pages and wheels) and apt (an unsigned Debian repository), with real packages
the real clients install. Shared by tests/e2e/test_package_mirror.py and bench/mirror.py.
`base` is the registry's URL as clients see it (https://npm.example or http://10.0.0.2)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path


def npm_tree(root: Path, base: str, prefix: str, count: int, versions: int = 20) -> None:
    """`count` npm packages PREFIX-0..: each depends on two further ones (a tree of depth
    log2(count)); a packument lists `versions` versions, as real ones list many, and only the
    newest has a tarball (what `^1.0.0` resolves to). Each tarball holds 24 KB of noise."""
    for i in range(count):
        name = f"{prefix}-{i}"
        deps = {f"{prefix}-{j}": "^1.0.0" for j in (2 * i + 1, 2 * i + 2) if j < count}
        latest = f"1.0.{versions - 1}"
        manifest = {"name": name, "version": latest, "main": "index.js", "dependencies": deps}
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            for member, data in (("package/package.json", json.dumps(manifest).encode()),
                                 ("package/index.js",
                                  f"module.exports = {json.dumps(name)};\n// ".encode()
                                  + base64.b64encode(os.urandom(18_000)) + b"\n")):
                info = tarfile.TarInfo(member)
                info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
                t.addfile(info, io.BytesIO(data))
        tgz = buf.getvalue()
        d = root / name
        (d / "-").mkdir(parents=True)
        (d / "-" / f"{name}-{latest}.tgz").write_bytes(tgz)
        tarball = {"tarball": f"{base}/{name}/-/{name}-{latest}.tgz",
                   "shasum": hashlib.sha1(tgz).hexdigest(),
                   "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}
        doc = {"name": name, "dist-tags": {"latest": latest}, "versions": {}}
        for v in range(versions):
            version = f"1.0.{v}"
            doc["versions"][version] = {
                "name": name, "version": version, "dependencies": deps,
                "description": f"{name} {version}: " + "a package of the mirror tests. " * 30,
                "dist": tarball if version == latest else {
                    "tarball": f"{base}/{name}/-/{name}-{version}.tgz", "shasum": "0" * 40}}
        (d / "packument.json").write_text(json.dumps(doc))


def wheel(name: str, version: str, requires: list[str]) -> tuple[str, bytes]:
    """A real wheel (PEP 427) of `name` with its Requires-Dist and 30 KB of noise."""
    mod = name.replace("-", "_")
    dist = f"{mod}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{mod}/__init__.py": f"VERSION = {version!r}\n# ".encode() + base64.b64encode(os.urandom(22_000)),
             f"{dist}/METADATA": meta.encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: warren-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{dist}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{dist}/RECORD", record)
    return f"{mod}-{version}-py3-none-any.whl", buf.getvalue()


def pypi_project(root: Path, base: str, name: str, releases: dict[str, list[str]]) -> None:
    """A PEP 503 page for `name` listing a wheel per release (version -> requirements)."""
    links = []
    for version, requires in releases.items():
        fname, data = wheel(name, version, requires)
        path = root / "packages" / name / fname
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        links.append(f'<a href="{base}/packages/{name}/{fname}#sha256={hashlib.sha256(data).hexdigest()}">'
                     f"{fname}</a><br/>")
    page = root / "simple" / name / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    # A later edit must carry a later Last-Modified (the validator the registry sends).
    os.utime(page, (time.time(), time.time()))


def pypi_tree(root: Path, base: str, prefix: str) -> None:
    """PREFIX-a requires PREFIX-b and PREFIX-c; PREFIX-b requires PREFIX-d."""
    for name, requires in (("a", ["b", "c"]), ("b", ["d"]), ("c", []), ("d", [])):
        pypi_project(root, base, f"{prefix}-{name}", {"1.0": [f"{prefix}-{r}" for r in requires]})


def apt_repo(root: Path, prefix: str, top: str = "debian", says: str = "") -> None:
    """A real (unsigned) Debian repository under root/TOP for the suite bookworm:
    PREFIX-hello depends on PREFIX-lib, 200 KB each (uncompressed .debs); with `says`,
    PREFIX-hello also installs the program /usr/bin/PREFIX-hello that prints it."""
    work = Path(tempfile.mkdtemp(prefix="warren-registry-deb-"))
    try:
        for name, depends in ((f"{prefix}-lib", ""), (f"{prefix}-hello", f"{prefix}-lib")):
            pkg = work / name
            (pkg / "DEBIAN").mkdir(parents=True)
            (pkg / f"usr/share/{prefix}").mkdir(parents=True)
            (pkg / "DEBIAN/control").write_text(
                f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: Warren tests <t@warren.invalid>\n"
                + (f"Depends: {depends}\n" if depends else "") + f"Description: {name} of the mirror tests\n")
            (pkg / f"usr/share/{prefix}/{name}.dat").write_bytes(os.urandom(200_000))
            if says and depends:  # the -hello package
                (pkg / "usr/bin").mkdir(parents=True)
                (pkg / f"usr/bin/{name}").write_text(f"#!/bin/sh\necho {shlex.quote(says)}\n")
                os.chmod(pkg / f"usr/bin/{name}", 0o755)
            pool = root / top / "pool/main" / name[0] / name
            pool.mkdir(parents=True)
            subprocess.run(["dpkg-deb", "-Znone", "--root-owner-group", "--build", str(pkg),
                            str(pool / f"{name}_1.0_all.deb")], check=True, capture_output=True)
    finally:
        shutil.rmtree(work)
    dist = root / top / "dists/bookworm"
    (dist / "main/binary-amd64").mkdir(parents=True, exist_ok=True)
    packages = subprocess.run(["apt-ftparchive", "packages", "pool"], cwd=root / top, check=True,
                              capture_output=True, text=True).stdout
    (dist / "main/binary-amd64/Packages").write_text(packages)
    release = subprocess.run(
        ["apt-ftparchive", "-o", "APT::FTPArchive::Release::Suite=bookworm",
         "-o", "APT::FTPArchive::Release::Codename=bookworm", "-o", "APT::FTPArchive::Release::Components=main",
         "-o", "APT::FTPArchive::Release::Architectures=amd64", "release", "."],
        cwd=dist, check=True, capture_output=True, text=True).stdout
    (dist / "Release").write_text(release)
