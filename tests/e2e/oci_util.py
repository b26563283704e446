"""OCI image layouts, OCI archives and `docker save` archives, written in pure Python.

Every byte of every layer is under the test's control: a layer is a list of entry specs
(made by the helpers below), written in the order given, so tests can build exactly the
whiteouts, opaque markers, hard links, device nodes, setuid bits, xattrs and long names they
want to see flattened. Output is deterministic: fixed mtimes, no owner names, gzip mtime 0.

    base = busybox_layer()
    img = Image([base, [file("etc/greeting", b"hi\\n"), whiteout("etc/marker")]])
    write_oci_layout(dir, [("e2e:v1", img)])            # index.json ref.name = "e2e:v1"
    write_docker_save(path, [(["e2e/img:v1"], img)])    # manifest.json + <id>/layer.tar
    idx = Index([img, Image([...], arch="arm64")])      # a multi-platform image index
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

MTIME = 1_700_000_000  # every entry's default mtime (2023-11-14)

MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
MT_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
REF_NAME = "org.opencontainers.image.ref.name"

Entry = Dict[str, object]


# -- entry specs -------------------------------------------------------------------------
def _entry(kind: str, path: str, *, mode: int, uid: int = 0, gid: int = 0, mtime: int = MTIME,
           xattrs: Optional[Dict[str, Union[str, bytes]]] = None, **kw) -> Entry:
    e: Entry = {"kind": kind, "path": path, "mode": mode, "uid": uid, "gid": gid, "mtime": mtime,
                "xattrs": dict(xattrs or {})}
    e.update(kw)
    return e


def file(path: str, content: Union[bytes, str] = b"", mode: int = 0o644, **kw) -> Entry:
    """A regular file; `content` may be str (UTF-8). kw: uid, gid, mtime, xattrs."""
    if isinstance(content, str):
        content = content.encode()
    return _entry("file", path, mode=mode, content=content, **kw)


def directory(path: str, mode: int = 0o755, **kw) -> Entry:
    return _entry("dir", path, mode=mode, **kw)


def symlink(path: str, target: str, **kw) -> Entry:
    return _entry("symlink", path, mode=0o777, target=target, **kw)


def hardlink(path: str, target: str, **kw) -> Entry:
    """A hard link to `target` (a path in the same layer, written earlier)."""
    return _entry("hardlink", path, mode=0o644, target=target, **kw)


def chardev(path: str, major: int, minor: int, mode: int = 0o666, **kw) -> Entry:
    return _entry("chardev", path, mode=mode, major=major, minor=minor, **kw)


def blockdev(path: str, major: int, minor: int, mode: int = 0o660, **kw) -> Entry:
    return _entry("blockdev", path, mode=mode, major=major, minor=minor, **kw)


def fifo(path: str, mode: int = 0o644, **kw) -> Entry:
    return _entry("fifo", path, mode=mode, **kw)


def whiteout(path: str) -> Entry:
    """Deletes `path` (file or whole directory) from the layers below: `DIR/.wh.BASE`."""
    d, _, base = path.rstrip("/").rpartition("/")
    return file((d + "/" if d else "") + ".wh." + base, b"", mode=0o644)


def opaque(dirpath: str) -> Entry:
    """Hides everything the layers below have in `dirpath`: `DIR/.wh..wh..opq`."""
    d = dirpath.strip("/")
    return file((d + "/" if d else "") + ".wh..wh..opq", b"", mode=0o644)


_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
          "hardlink": tarfile.LNKTYPE, "chardev": tarfile.CHRTYPE, "blockdev": tarfile.BLKTYPE,
          "fifo": tarfile.FIFOTYPE}


def layer_tar(entries: Iterable[Entry], fmt: str = "pax", prefix: str = "") -> bytes:
    """An uncompressed layer tar. fmt: "pax" (xattrs as SCHILY.xattr.*) or "gnu" (long names
    as ././@LongLink; no xattrs). `prefix` is put before every name (e.g. "./")."""
    tar_format = {"pax": tarfile.PAX_FORMAT, "gnu": tarfile.GNU_FORMAT}[fmt]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tar_format, encoding="utf-8") as tf:
        for e in entries:
            ti = tarfile.TarInfo(prefix + str(e["path"]))
            ti.type = _TYPES[str(e["kind"])]
            ti.mode = int(e["mode"])  # type: ignore[arg-type]
            ti.uid, ti.gid = int(e["uid"]), int(e["gid"])  # type: ignore[arg-type]
            ti.uname = ti.gname = ""
            ti.mtime = int(e["mtime"])  # type: ignore[arg-type]
            if e["kind"] in ("symlink", "hardlink"):
                t = str(e["target"])
                ti.linkname = prefix + t if e["kind"] == "hardlink" else t
            if e["kind"] in ("chardev", "blockdev"):
                ti.devmajor, ti.devminor = int(e["major"]), int(e["minor"])  # type: ignore[arg-type]
            xattrs = e.get("xattrs") or {}
            if xattrs:
                if fmt != "pax":
                    raise ValueError("xattrs need the pax format")
                ti.pax_headers = {"SCHILY.xattr." + k: (v.decode("utf-8", "surrogateescape")
                                                        if isinstance(v, bytes) else v)
                                  for k, v in xattrs.items()}  # type: ignore[union-attr]
            data = None
            if e["kind"] == "file":
                content = e["content"]
                assert isinstance(content, bytes)
                ti.size = len(content)
                data = io.BytesIO(content)
            tf.addfile(ti, data)
    return buf.getvalue()


# -- a runnable base layer ---------------------------------------------------------------
_BUSYBOX: Optional[Tuple[bytes, List[str]]] = None


def _busybox() -> Tuple[bytes, List[str]]:
    """The static busybox binary and its applets' paths (cached)."""
    global _BUSYBOX
    if _BUSYBOX is None:
        bb = shutil.which("busybox", path="/bin:/usr/bin:/sbin:/usr/sbin")
        if not bb:
            raise RuntimeError("busybox not found: apt-get install busybox-static")
        with open(bb, "rb") as f:
            data = f.read()
        listing = subprocess.run([bb, "--list-full"], capture_output=True, text=True, check=True)
        applets = sorted({p.strip("/") for p in listing.stdout.split() if p.strip("/")} - {"bin/busybox"})
        _BUSYBOX = (data, applets)
    return _BUSYBOX


def busybox_entries(marker: str = "base") -> List[Entry]:
    """A minimal runnable root: the usual directories, /bin/busybox and a symlink per applet,
    /etc/passwd and /etc/group, and /etc/layer containing `marker`."""
    data, applets = _busybox()
    dirs = ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "dev", "sys", "var",
            "home", "run", "opt"]
    out = [directory(d) for d in dirs]
    out += [directory("tmp", 0o1777), directory("var/tmp", 0o1777), directory("root", 0o700)]
    out.append(file("bin/busybox", data, 0o755))
    for a in applets:
        out.append(symlink(a, "/bin/busybox"))
    out.append(file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                                  "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
    out.append(file("etc/group", "root:x:0:\nnogroup:x:65534:\n"))
    out.append(file("etc/layer", marker + "\n"))
    return out


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def _zstd(data: bytes) -> bytes:
    """zstd via the CLI (Debian's python3 has no zstandard module); deterministic."""
    zstd = shutil.which("zstd")
    if not zstd:
        raise RuntimeError("zstd not found: apt-get install zstd")
    return subprocess.run([zstd, "-q", "-c", "-3"], input=data, capture_output=True, check=True).stdout


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- images --------------------------------------------------------------------------------
class Blob:
    def __init__(self, data: bytes, media_type: str):
        self.data = data
        self.media_type = media_type
        self.digest = sha256(data)

    def descriptor(self, **extra) -> dict:
        d = {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}
        d.update(extra)
        return d


class Layer:
    """One layer: its entries, the uncompressed tar (diff_id) and the blob (gzip by default)."""

    def __init__(self, entries: Sequence[Entry], fmt: str = "pax",
                 compress: Union[bool, str, None] = "gzip", prefix: str = ""):
        """compress: "gzip" (or True), "zstd", or None/False for a plain tar."""
        self.entries = list(entries)
        self.tar = layer_tar(self.entries, fmt=fmt, prefix=prefix)
        self.diff_id = sha256(self.tar)
        if compress in ("gzip", True):
            self.blob = Blob(_gzip(self.tar), MT_OCI_LAYER_GZIP)
        elif compress == "zstd":
            self.blob = Blob(_zstd(self.tar), MT_OCI_LAYER_ZSTD)
        elif not compress:
            self.blob = Blob(self.tar, MT_OCI_LAYER)
        else:
            raise ValueError(f"unknown compression {compress!r}")


_BASE_LAYERS: Dict[str, Layer] = {}


def busybox_layer(marker: str = "base") -> Layer:
    """The busybox base layer (built once per marker and reused: compressing it is the cost)."""
    if marker not in _BASE_LAYERS:
        _BASE_LAYERS[marker] = Layer(busybox_entries(marker))
    return _BASE_LAYERS[marker]


LayerSpec = Union[Layer, Sequence[Entry]]


class Image:
    """A single-platform image: config (with rootfs.diff_ids) and manifest."""

    def __init__(self, layers: Sequence[LayerSpec], arch: str = "amd64", os_name: str = "linux",
                 config: Optional[dict] = None, variant: Optional[str] = None):
        self.layers = [l if isinstance(l, Layer) else Layer(l) for l in layers]
        self.arch, self.os, self.variant = arch, os_name, variant
        cfg = {
            "architecture": arch, "os": os_name,
            "created": "2023-11-14T22:13:20Z",
            "config": {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": [l.diff_id for l in self.layers]},
            "history": [{"created": "2023-11-14T22:13:20Z", "created_by": f"e2e layer {i}"}
                        for i in range(len(self.layers))],
        }
        if variant:
            cfg["variant"] = variant
        cfg.update(config or {})
        self.config = Blob(json.dumps(cfg, sort_keys=True).encode(), MT_OCI_CONFIG)
        manifest = {
            "schemaVersion": 2, "mediaType": MT_OCI_MANIFEST,
            "config": self.config.descriptor(),
            "layers": [l.blob.descriptor() for l in self.layers],
        }
        self.manifest = Blob(json.dumps(manifest, sort_keys=True).encode(), MT_OCI_MANIFEST)
        self.digest = self.manifest.digest

    def platform(self) -> dict:
        p = {"architecture": self.arch, "os": self.os}
        if self.variant:
            p["variant"] = self.variant
        return p

    def blobs(self) -> List[Blob]:
        return [self.manifest, self.config] + [l.blob for l in self.layers]

    def descriptor(self, with_platform: bool = False, **annotations) -> dict:
        d = self.manifest.descriptor()
        if with_platform:
            d["platform"] = self.platform()
        if annotations:
            d["annotations"] = dict(annotations)
        return d


class Index:
    """An image index (manifest list): one manifest per platform."""

    def __init__(self, images: Sequence[Image]):
        self.images = list(images)
        idx = {"schemaVersion": 2, "mediaType": MT_OCI_INDEX,
               "manifests": [i.descriptor(with_platform=True) for i in self.images]}
        self.manifest = Blob(json.dumps(idx, sort_keys=True).encode(), MT_OCI_INDEX)
        self.digest = self.manifest.digest

    def blobs(self) -> List[Blob]:
        out = [self.manifest]
        for i in self.images:
            out += i.blobs()
        return out

    def descriptor(self, with_platform: bool = False, **annotations) -> dict:
        d = self.manifest.descriptor()
        if annotations:
            d["annotations"] = dict(annotations)
        return d


Target = Union[Image, Index]


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def blob_path(layout: str, digest: str) -> str:
    alg, _, hexd = digest.partition(":")
    return os.path.join(layout, "blobs", alg, hexd)


def write_oci_layout(layout: str, refs: Sequence[Tuple[Optional[str], Target]],
                     with_platform: bool = False) -> str:
    """An OCI image layout at `layout`: `oci-layout`, `index.json` (one descriptor per ref,
    annotated with org.opencontainers.image.ref.name when the name is not None) and
    blobs/sha256/*. `with_platform` puts each image's platform into its index.json descriptor
    (how a layout can hold several platforms without a nested index)."""
    os.makedirs(layout, exist_ok=True)
    manifests = []
    for name, target in refs:
        for b in target.blobs():
            _write(blob_path(layout, b.digest), b.data)
        ann = {REF_NAME: name} if name is not None else {}
        manifests.append(target.descriptor(with_platform=with_platform, **ann))
    _write(os.path.join(layout, "oci-layout"), b'{"imageLayoutVersion":"1.0.0"}')
    index = {"schemaVersion": 2, "mediaType": MT_OCI_INDEX, "manifests": manifests}
    _write(os.path.join(layout, "index.json"), json.dumps(index, indent=1).encode())
    return layout


def _tar_of_tree(root: str, out_path: str, compress: Optional[str]) -> str:
    """Tar the contents of `root` (names relative to it), optionally gzip-compressed."""
    mode = {"gzip": "w:gz", None: "w"}[compress]
    with tarfile.open(out_path, mode, format=tarfile.PAX_FORMAT) as tf:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                ti = tf.gettarinfo(full, os.path.relpath(full, root))
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                ti.mtime = MTIME
                with open(full, "rb") as f:
                    tf.addfile(ti, f)
    return out_path


def write_oci_archive(out_path: str, layout: str, compress: Optional[str] = None) -> str:
    """An OCI archive (`skopeo copy ... oci-archive:`): the layout directory as a tar."""
    return _tar_of_tree(layout, out_path, compress)


def write_docker_save(out_path: str, images: Sequence[Tuple[List[str], Image]],
                      compress: Optional[str] = None) -> str:
    """A classic `docker save` archive: manifest.json ([{Config, RepoTags, Layers}]), the
    config as <hex>.json, each layer uncompressed as <id>/layer.tar (plus VERSION and json),
    and `repositories`."""
    stage = out_path + ".d"
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    try:
        manifest, repositories = [], {}
        for tags, img in images:
            cfg_name = img.config.digest.split(":")[1] + ".json"
            _write(os.path.join(stage, cfg_name), img.config.data)
            layer_paths, parent = [], ""
            for layer in img.layers:
                # docker's v1 layer id: a hash of the chain, as docker computes it.
                lid = hashlib.sha256((parent + " " + layer.diff_id).encode()).hexdigest()
                _write(os.path.join(stage, lid, "layer.tar"), layer.tar)
                _write(os.path.join(stage, lid, "VERSION"), b"1.0")
                v1 = {"id": lid, "created": "2023-11-14T22:13:20Z"}
                if parent:
                    v1["parent"] = parent
                _write(os.path.join(stage, lid, "json"), json.dumps(v1).encode())
                layer_paths.append(lid + "/layer.tar")
                parent = lid
            manifest.append({"Config": cfg_name, "RepoTags": list(tags), "Layers": layer_paths})
            for t in tags:
                repo, _, tag = t.rpartition(":")
                repositories.setdefault(repo, {})[tag] = parent
        _write(os.path.join(stage, "manifest.json"), json.dumps(manifest).encode())
        _write(os.path.join(stage, "repositories"), json.dumps(repositories).encode())
        return _tar_of_tree(stage, out_path, compress)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
