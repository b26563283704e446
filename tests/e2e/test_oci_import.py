"""`warren image build --from-oci`: OCI layouts, docker-save and OCI archives, registry pulls
(HTTP, HTTPS with a CA, Basic and token auth, OCI and Docker media types, by tag and digest),
layer flattening (whiteouts, opaque dirs, replacements, hard links, symlinks, special bits,
devices, xattrs, long names) and `--from-tar` layer diffs whose whiteouts hide a base's files.

Images are written byte by byte in Python (oci_util); registries are real `docker-registry`
processes on 127.0.0.1 (registry_util). Nothing here talks to anything but loopback: tests that
hand Warren something it might mistake for a remote reference run it in an empty network
namespace (`unshare --net`).

What is checked where: file contents, types, modes, owners, links and device numbers inside a
real sandbox (busybox); xattrs and the overlay form of whiteouts in the server's EROFS blob,
parsed here (busybox has no getfattr, erofs-utils 1.5 extracts no xattrs, nothing is mounted).
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import random
import re
import shutil
import stat
import struct
import subprocess
import tempfile

import pytest

import oci_util as oci
import registry_util
from conftest import _scratch_base, safe_rmtree
from registry_util import Registry

ERROR_LINE = re.compile(r"^warren: .+: .+$")
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
OTHER_ARCH = "arm64" if HOST_ARCH != "arm64" else "amd64"

LONG_NAME = "n" * 200                                       # one 200-byte file name
DEEP_DIR = "opt/m/deep/" + "/".join(c * 60 for c in "abcdef")  # 376 bytes of path
GNU_NAME = "g" * 180
GNU_LINK = "h" * 190
# struct vfs_cap_data, revision 2: cap_net_raw (13) permitted + effective, as on ping(8)
CAP_NET_RAW = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)


# -- fixtures and helpers -----------------------------------------------------------------
@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="warren-e2e-oci-", dir=_scratch_base())
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        safe_rmtree(d)


@pytest.fixture(scope="module")
def built(server):
    """A list of image refs to remove at the end of the module."""
    refs: list = []
    yield refs
    for ref in refs:
        server.cli("image", "rm", ref)


def _env():
    # libcurl honours *_proxy: make sure no registry request leaves loopback.
    return {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
            "http_proxy": "", "https_proxy": "", "HTTP_PROXY": "", "HTTPS_PROXY": "",
            "ALL_PROXY": "", "all_proxy": ""}


def build(server, built, ref: str, source: str, *flags: str, env=None) -> str:
    """`warren image build REF --from-oci SOURCE FLAGS`; asserts success, returns the digest."""
    e = _env()
    e.update(env or {})
    r = server.cli("image", "build", ref, "--from-oci", source, *flags, env=e, timeout=300)
    if ref not in built:
        built.append(ref)
    assert r.returncode == 0, (f"image build {ref} --from-oci {source} failed ({r.returncode}):\n"
                               f"stdout: {r.stdout}\nstderr: {r.stderr}")
    name, digest = r.stdout.split()
    assert name == ref and re.fullmatch(r"sha256:[0-9a-f]{64}", digest), r.stdout
    return digest


def build_fails(server, ref: str, source: str, *flags: str, env=None, argv_prefix=()) -> str:
    """The build fails with one `warren: WHAT: WHY` line (the last line of stderr, after any
    progress lines) and creates no image; returns that line."""
    e = dict(server.env)
    e.update(_env())
    e.update(env or {})
    r = subprocess.run([*argv_prefix, server.bin, "image", "build", ref, "--from-oci", source, *flags],
                       env=e, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if r.returncode == 0:
        server.cli("image", "rm", ref)
    assert r.returncode != 0, f"image build {ref} --from-oci {source} succeeded:\n{r.stdout}{r.stderr}"
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("warren:")]
    assert len(errors) == 1 and lines[-1] == errors[0], f"want one final error line:\n{r.stderr}"
    assert ERROR_LINE.match(errors[0]), errors[0]
    assert "Traceback" not in r.stderr and "terminate called" not in r.stderr, r.stderr
    assert ref not in _layers(server), f"a failed build left {ref} behind"
    print(f"{ref}: {errors[0]}")
    return errors[0]


def _layers(server) -> dict:
    r = server.http("GET", "/v1/layers")
    assert r.status == 200, r
    return {l["ref"]: l for l in r.json["layers"]}


def sh(server, ref: str, script: str, *spec: str) -> str:
    """Run `sh -c SCRIPT` in a fresh sandbox of `ref` (plus SPEC flags); asserts exit 0."""
    r = server.cli("run", "--image", ref, *spec, "--", "sh", "-c", script, timeout=120)
    assert r.returncode == 0, (f"warren run --image {ref} {spec} failed ({r.returncode}):\n"
                               f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r.stdout


def facts(server, ref: str, script: str, *spec: str) -> dict:
    """Run a script printing `key=value` lines; returns them as a dict."""
    out = sh(server, ref, script, *spec)
    d = {}
    for line in out.splitlines():
        k, sep, v = line.partition("=")
        assert sep, f"unexpected output line {line!r} in:\n{out}"
        d[k] = v
    return d


def simple_image(marker: str, arch: str = "amd64", extra=()) -> oci.Image:
    """busybox + a layer with /etc/greeting = MARKER (and EXTRA entries)."""
    return oci.Image([oci.busybox_layer(), [oci.directory("etc"), oci.file("etc/greeting", marker + "\n"),
                                            *extra]], arch=arch)


def greeting(server, ref: str) -> str:
    return sh(server, ref, "cat /etc/greeting").strip()


def blob_file(server, digest: str) -> str:
    """Where a layer's EROFS image is kept (serve's data dir, or a cluster's shared store). A
    chunked layer's blob is its manifest: its metadata image holds every inode and xattr."""
    p = os.path.join(server.layer_dir(), "blobs", "sha256", digest.split(":", 1)[1])
    assert os.path.isfile(p), f"no blob at {p}"
    with open(p, "rb") as f:
        text = f.read()
    meta = None
    if text[:8] == b"WRNLAYR\x02":  # manifest v2 (image/layer_manifest.cc): meta sha256 at 32
        meta = text[32:64].hex()
    elif text[:1] == b"{":  # manifest v1, JSON
        meta = json.loads(text)["meta"]["sha256"]
    if meta:
        p = os.path.join(server.layer_dir(), "meta", "sha256", meta)
        assert os.path.isfile(p), f"no metadata image at {p}"
    return p


def erofs_inode(image_path: str, path: str) -> dict:
    """PATH inside an EROFS image, read from the on-disk format (erofs-utils 1.5 can neither
    extract xattrs nor print device numbers, and mounting is not ours to do): dump.erofs gives
    the inode's NID; the inode gives mode, owner and rdev; its xattr body holds shared xattr ids
    and inline entries. Returns {"mode", "uid", "gid", "rdev": (major, minor), "xattrs"}."""
    # A chunked layer's metadata image names a data device (superblock's extra_devices);
    # inodes need none of its data.
    with open(image_path, "rb") as f:
        f.seek(1024 + 86)
        devices = ["--device=/dev/null"] * struct.unpack("<H", f.read(2))[0]
    r = subprocess.run(["dump.erofs", *devices, "--path=" + path, image_path],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"dump.erofs --path={path}: {r.stdout}{r.stderr}"
    nid = int(re.search(r"NID:\s*(\d+)", r.stdout).group(1))
    with open(image_path, "rb") as f:
        data = f.read()
    sb = 1024
    assert struct.unpack_from("<I", data, sb)[0] == 0xE0F5E1E2, "not EROFS"
    blksz = 1 << data[sb + 12]
    meta_blkaddr, xattr_blkaddr = struct.unpack_from("<II", data, sb + 40)
    ino = meta_blkaddr * blksz + nid * 32
    i_format, icount, mode = struct.unpack_from("<HHH", data, ino)
    if i_format & 1:  # struct erofs_inode_extended (64 bytes)
        i_u, = struct.unpack_from("<I", data, ino + 16)
        uid, gid = struct.unpack_from("<II", data, ino + 24)
        size = 64
    else:             # struct erofs_inode_compact (32 bytes)
        i_u, = struct.unpack_from("<I", data, ino + 16)
        uid, gid = struct.unpack_from("<HH", data, ino + 24)
        size = 32
    out = {"mode": mode, "uid": uid, "gid": gid, "rdev": None, "xattrs": {}}
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):  # new_encode_dev()
        out["rdev"] = ((i_u & 0xFFF00) >> 8, (i_u & 0xFF) | ((i_u >> 12) & 0xFFF00))
    if icount == 0:
        return out
    body = ino + size
    end = body + 12 + (icount - 1) * 4
    shared = data[body + 4]
    prefixes = {1: "user.", 2: "system.posix_acl_access", 3: "system.posix_acl_default",
                4: "trusted.", 6: "security."}

    def entry(off):
        name_len, index, value_size = struct.unpack_from("<BBH", data, off)
        name = data[off + 4:off + 4 + name_len].decode()
        value = data[off + 4 + name_len:off + 4 + name_len + value_size]
        return prefixes.get(index, f"?{index}.") + name, value, (4 + name_len + value_size + 3) & ~3

    xattrs = out["xattrs"]
    for i in range(shared):
        xid = struct.unpack_from("<I", data, body + 12 + 4 * i)[0]
        k, v, _ = entry(xattr_blkaddr * blksz + xid * 4)
        xattrs[k] = v
    off = body + 12 + 4 * shared
    while off < end:
        k, v, n = entry(off)
        xattrs[k] = v
        off += n
    return out


def erofs_xattrs(image_path: str, path: str) -> dict:
    return erofs_inode(image_path, path)["xattrs"]


# -- the merge image: every flattening rule in three layers ---------------------------------
def merge_layers():
    F, D, L, H = oci.file, oci.directory, oci.symlink, oci.hardlink
    layer1 = oci.Layer([
        D("opt/m"), D("opt/m/wh"),
        F("opt/m/wh/file-gone", "gone\n"), F("opt/m/wh/file-kept", "kept\n"),
        D("opt/m/wh/dir-gone"), D("opt/m/wh/dir-gone/sub"), F("opt/m/wh/dir-gone/sub/a", "a\n"),
        F("opt/m/wh/dir-gone/b", "b\n"),
        D("opt/m/wh/dir-redo"), F("opt/m/wh/dir-redo/old", "old\n"),
        D("opt/m/opq"), F("opt/m/opq/lower1", "l1\n"), D("opt/m/opq/lower-sub"),
        F("opt/m/opq/lower-sub/x", "x\n"),
        F("opt/m/f2d", "was a file\n"),
        D("opt/m/d2f"), F("opt/m/d2f/inner", "inner\n"), D("opt/m/d2f/sub"), F("opt/m/d2f/sub/deeper", "d\n"),
        D("opt/m/hl"), F("opt/m/hl/target", "old content\n"),
        H("opt/m/hl/link", "opt/m/hl/target"), H("opt/m/hl/link2", "opt/m/hl/target"),
        F("opt/m/hl/pair-a", "pair\n"), H("opt/m/hl/pair-b", "opt/m/hl/pair-a"),
        F("opt/m/hl/gone", "survivor\n"), H("opt/m/hl/survivor", "opt/m/hl/gone"),
        D("opt/m/hl/dir"), F("opt/m/hl/dir/f", "in a deleted dir\n"), H("opt/m/hl/out", "opt/m/hl/dir/f"),
        F("opt/m/recreated", "layer1\n"),
        L("opt/m/sym-replaced", "/etc/passwd"),
    ], prefix="./")  # `tar -C root .` style names
    deep = [D("opt/m/deep")]
    parts = DEEP_DIR.split("/")
    for i in range(3, len(parts) + 1):
        deep.append(D("/".join(parts[:i])))
    layer2 = oci.Layer([
        D("opt/m"), D("opt/m/wh"),
        oci.whiteout("opt/m/wh/file-gone"), oci.whiteout("opt/m/wh/dir-gone"),
        oci.whiteout("opt/m/wh/dir-redo"),
        D("opt/m/opq"), oci.opaque("opt/m/opq"), F("opt/m/opq/upper", "upper\n"),
        D("opt/m/f2d"), F("opt/m/f2d/now", "dir content\n"),
        F("opt/m/d2f", "now a file\n"),
        D("opt/m/hl"), F("opt/m/hl/target", "new content\n"), oci.whiteout("opt/m/hl/gone"),
        oci.whiteout("opt/m/hl/dir"),
        oci.whiteout("opt/m/recreated"),
        F("opt/m/sym-replaced", "plain file\n"),
        D("opt/m/links"), L("opt/m/links/rel", "../wh/file-kept"),
        L("opt/m/links/abs", "/opt/m/wh/file-kept"), L("opt/m/links/dangling", "/nonexistent/target"),
        L("opt/m/links/dirlink", "../opq"),
        D("opt/m/perm"), F("opt/m/perm/suid", "#!/bin/sh\necho suid\n", 0o4755),
        F("opt/m/perm/sgid", "sgid\n", 0o2755), D("opt/m/perm/sticky", 0o1777),
        F("opt/m/perm/owned", "owned\n", 0o640, uid=1000, gid=2000, mtime=1234567890),
        D("opt/dev"), oci.chardev("opt/dev/null0", 1, 3), oci.blockdev("opt/dev/loop9", 7, 9),
        oci.fifo("opt/dev/fifo0"),
        D("opt/m/xattr", xattrs={"user.e2e.dir": "dir-value"}),
        F("opt/m/xattr/f", "x\n", xattrs={"user.e2e": "hello-xattr", "user.e2e.second": "2"}),
        F("opt/m/xattr/ping", "caps\n", 0o755, xattrs={"security.capability": CAP_NET_RAW}),
        D("opt/m/long"), F("opt/m/long/" + LONG_NAME, "long name\n"),
        *deep, F(DEEP_DIR + "/leaf.txt", "deep leaf\n"),
    ])
    layer3 = oci.Layer([
        F("opt/m/recreated", "layer3\n"),
        D("opt/m/wh/dir-redo", 0o750), F("opt/m/wh/dir-redo/new", "new\n"),
        D("opt/m/gnu"), F("opt/m/gnu/" + GNU_NAME, "gnu long\n"),
        H("opt/m/gnu/" + GNU_LINK, "opt/m/gnu/" + GNU_NAME),
        L("opt/m/gnu/longsym", "/opt/m/gnu/" + GNU_NAME),
        F("etc/layer", "top\n"),
    ], fmt="gnu")  # ././@LongLink names, as GNU tar writes them
    return [oci.busybox_layer(), layer1, layer2, layer3]


@pytest.fixture(scope="module")
def merged(server, built, work):
    """The merge image, imported from an OCI layout: (ref, digest, oci.Image)."""
    img = oci.Image(merge_layers())
    layout = oci.write_oci_layout(os.path.join(work, "merge-layout"), [("merge", img)])
    ref = "oci-e2e-merge:1"
    return ref, build(server, built, ref, layout), img


# -- OCI layout basics ------------------------------------------------------------------------
def test_oci_layout_import_runs(server, built, work):
    img = simple_image("hello from an OCI layout")
    layout = oci.write_oci_layout(os.path.join(work, "basic"), [("v1", img)])
    digest = build(server, built, "oci-e2e-basic:1", layout)
    assert greeting(server, "oci-e2e-basic:1") == "hello from an OCI layout"
    rec = _layers(server)["oci-e2e-basic:1"]
    assert rec["kind"] == "base" and rec["digest"] == digest
    # The source names the layout and the manifest that was read.
    assert rec["source"] == f"oci:{layout}@{img.digest}", rec
    # The same image flattens to the same EROFS bytes (reproducible digests), via the
    # skopeo-style `oci:` prefix and the PATH:NAME form too.
    assert build(server, built, "oci-e2e-basic:2", "oci:" + layout + ":v1") == digest
    # Busybox runs, /bin/sh is a symlink, base directories keep their modes.
    f = facts(server, "oci-e2e-basic:1",
              'echo sh=$(readlink /bin/sh); echo tmp=$(stat -c %a /tmp); echo root=$(stat -c %a /root);'
              'echo layer=$(cat /etc/layer)')
    assert f == {"sh": "/bin/busybox", "tmp": "1777", "root": "700", "layer": "base"}


def test_uncompressed_layers_and_kind(server, built, work):
    """Layers may be plain tar (…layer.v1.tar); --kind is recorded."""
    img = oci.Image([oci.busybox_layer(),
                     oci.Layer([oci.file("etc/greeting", "plain tar layer\n")], compress=False)])
    assert img.layers[1].blob.media_type == oci.MT_OCI_LAYER
    layout = oci.write_oci_layout(os.path.join(work, "plain"), [("v1", img)])
    build(server, built, "oci-e2e-plain:1", layout, "--kind", "tool")
    assert _layers(server)["oci-e2e-plain:1"]["kind"] == "tool"
    assert greeting(server, "oci-e2e-plain:1") == "plain tar layer"


def test_zstd_layer_with_absolute_names(server, built, work):
    """A zstd layer (…tar+zstd) whose entries are written as absolute paths, whiteout included."""
    img = oci.Image([oci.busybox_layer(),
                     oci.Layer([oci.file("etc/greeting", "zstd layer\n"), oci.whiteout("etc/layer"),
                                oci.hardlink("etc/greeting-link", "etc/greeting")],
                               compress="zstd", prefix="/")])
    assert img.layers[1].blob.media_type == oci.MT_OCI_LAYER_ZSTD
    layout = oci.write_oci_layout(os.path.join(work, "zstd"), [("v1", img)])
    build(server, built, "oci-e2e-zstd:1", layout)
    f = facts(server, "oci-e2e-zstd:1",
              "echo g=$(cat /etc/greeting)/$(cat /etc/greeting-link)/$(stat -c %h /etc/greeting);"
              "[ -e /etc/layer ] && echo layer=present || echo layer=gone")
    assert f == {"g": "zstd layer/zstd layer/2", "layer": "gone"}


def test_flatten_is_reproducible_when_upper_layers_omit_parent_dirs(server, built, work):
    # Layer 2 adds /etc/greeting but has no entry for /etc (as many layer builders write).
    img = oci.Image([oci.busybox_layer(), [oci.file("etc/greeting", "no parent entry\n")]])
    layout = oci.write_oci_layout(os.path.join(work, "no-parent"), [("v1", img)])
    d1 = build(server, built, "oci-e2e-noparent:1", layout)
    d2 = build(server, built, "oci-e2e-noparent:2", layout)
    f = facts(server, "oci-e2e-noparent:1", "echo etc=$(stat -c %Y /etc); echo g=$(cat /etc/greeting)")
    assert f == {"etc": str(oci.MTIME), "g": "no parent entry"}, f
    assert d1 == d2, "the same image flattened twice gave two different layers"


# -- flattening ------------------------------------------------------------------------------
def test_whiteouts_delete_files_and_directories(server, merged):
    ref = merged[0]
    f = facts(server, ref,
              'cd /opt/m/wh; for p in file-gone file-kept dir-gone dir-redo dir-redo/old dir-redo/new; do'
              '  if [ -e $p ]; then echo "$p=yes"; else echo "$p=no"; fi; done;'
              'echo kept=$(cat file-kept); echo redo-mode=$(stat -c %a dir-redo);'
              'echo ls=$(ls -A | tr "\\n" " ");'
              'echo wh-names=$(find / -xdev -name ".wh.*" 2>/dev/null | wc -l)')
    assert f["file-gone"] == "no" and f["dir-gone"] == "no", f
    assert f["file-kept"] == "yes" and f["kept"] == "kept", f
    # Whited out in layer 2, made again in layer 3: only layer 3's content, with its mode.
    assert f["dir-redo"] == "yes" and f["dir-redo/old"] == "no" and f["dir-redo/new"] == "yes", f
    assert f["redo-mode"] == "750", f
    assert f["ls"].split() == ["dir-redo", "file-kept"], f
    assert f["wh-names"] == "0", "whiteout entries leaked into the flattened image"


def test_whiteout_then_recreate_and_replace_base_file(server, merged):
    f = facts(server, merged[0], "echo recreated=$(cat /opt/m/recreated); echo layer=$(cat /etc/layer)")
    assert f == {"recreated": "layer3", "layer": "top"}


def test_opaque_directory(server, merged):
    out = sh(server, merged[0], "ls -A /opt/m/opq; cat /opt/m/opq/upper")
    # Lower content is gone (files and subdirectories); the marking layer's own content stays.
    assert out.split("\n") == ["upper", "upper", ""], out


def test_file_replaced_by_directory_and_back(server, merged):
    f = facts(server, merged[0],
              "echo f2d-type=$(stat -c %F /opt/m/f2d); echo f2d-ls=$(ls -A /opt/m/f2d);"
              "echo f2d-now=$(cat /opt/m/f2d/now);"
              "echo d2f-type=$(stat -c %F /opt/m/d2f); echo d2f=$(cat /opt/m/d2f)")
    assert f == {"f2d-type": "directory", "f2d-ls": "now", "f2d-now": "dir content",
                 "d2f-type": "regular file", "d2f": "now a file"}


def test_hard_links(server, merged):
    f = facts(server, merged[0],
              "cd /opt/m/hl; for p in target link link2 pair-a pair-b survivor out; do"
              "  echo $p=$(cat $p)/$(stat -c %i $p)/$(stat -c %h $p); done;"
              "for p in gone dir; do [ -e $p ] && echo $p=yes || echo $p=no; done")
    val = {k: v.split("/") for k, v in f.items() if k not in ("gone", "dir")}
    # The target was replaced above: the links keep the old content, as one inode of 2 links.
    assert val["target"][0] == "new content" and val["target"][2] == "1", f
    assert val["link"][0] == val["link2"][0] == "old content", f
    assert val["link"][1] == val["link2"][1] != val["target"][1], f
    assert val["link"][2] == val["link2"][2] == "2", f
    # An untouched pair stays one inode.
    assert val["pair-a"][0] == val["pair-b"][0] == "pair", f
    assert val["pair-a"][1] == val["pair-b"][1] and val["pair-a"][2] == "2", f
    # The target was whited out above: the link survives alone with the content.
    assert f["gone"] == "no" and val["survivor"][0] == "survivor" and val["survivor"][2] == "1", f
    # The target's whole directory was whited out: the link outside it keeps the content.
    assert f["dir"] == "no" and val["out"][0] == "in a deleted dir" and val["out"][2] == "1", f


def test_symlinks(server, merged):
    f = facts(server, merged[0],
              "cd /opt/m/links; for l in rel abs dangling dirlink; do echo $l=$(readlink $l); done;"
              "echo cat-rel=$(cat rel); echo cat-abs=$(cat abs); echo ls-dirlink=$(ls dirlink/);"
              "[ -L dangling ] && [ ! -e dangling ] && echo dangling-ok=1;"
              "echo replaced=$(stat -c %F /opt/m/sym-replaced)/$(cat /opt/m/sym-replaced)")
    assert f == {"rel": "../wh/file-kept", "abs": "/opt/m/wh/file-kept", "dangling": "/nonexistent/target",
                 "dirlink": "../opq", "cat-rel": "kept", "cat-abs": "kept", "ls-dirlink": "upper",
                 "dangling-ok": "1", "replaced": "regular file/plain file"}


def test_modes_owners_and_mtimes(server, merged):
    f = facts(server, merged[0],
              "cd /opt/m/perm; for p in suid sgid sticky owned; do echo $p=$(stat -c %a $p); done;"
              "echo owner=$(stat -c %u:%g owned); echo mtime=$(stat -c %Y owned);"
              "echo base-mtime=$(stat -c %Y /etc/passwd); echo run=$(/opt/m/perm/suid)")
    assert f["suid"] == "4755" and f["sgid"] == "2755" and f["sticky"] == "1777", f
    assert f["owned"] == "640" and f["owner"] == "1000:2000", f
    assert f["mtime"] == "1234567890" and f["base-mtime"] == str(oci.MTIME), f
    assert f["run"] == "suid", f


def test_device_nodes_and_fifo(server, merged):
    # Sandboxes mount their own /dev, so the image's nodes live in /opt/dev.
    f = facts(server, merged[0],
              "cd /opt/dev; for p in null0 loop9 fifo0; do echo $p=$(stat -c '%F/%t/%T/%a' $p); done")
    assert f["null0"] == "character special file/1/3/666", f
    assert f["loop9"] == "block special file/7/9/660", f
    assert f["fifo0"].startswith("fifo/"), f


def test_xattrs_reach_the_erofs_layer(server, merged):
    """Busybox has no getfattr: read the xattrs from the server's EROFS blob itself."""
    blob = blob_file(server, merged[1])
    assert erofs_xattrs(blob, "/opt/m/xattr/f") == {"user.e2e": b"hello-xattr", "user.e2e.second": b"2"}
    assert erofs_xattrs(blob, "/opt/m/xattr") == {"user.e2e.dir": b"dir-value"}
    assert erofs_xattrs(blob, "/opt/m/wh/file-kept") == {}
    # Binary values too (pax hdrcharset=BINARY): file capabilities.
    assert erofs_xattrs(blob, "/opt/m/xattr/ping") == {"security.capability": CAP_NET_RAW}
    # Device numbers as stored, not just as the sandbox shows them.
    null0 = erofs_inode(blob, "/opt/dev/null0")
    assert stat.S_ISCHR(null0["mode"]) and null0["rdev"] == (1, 3), null0
    loop9 = erofs_inode(blob, "/opt/dev/loop9")
    assert stat.S_ISBLK(loop9["mode"]) and loop9["rdev"] == (7, 9), loop9
    owned = erofs_inode(blob, "/opt/m/perm/owned")
    assert (owned["uid"], owned["gid"], stat.S_IMODE(owned["mode"])) == (1000, 2000, 0o640), owned
    # …and the sandbox sees the file itself.
    assert sh(server, merged[0], "cat /opt/m/xattr/f") == "x\n"


def test_long_names_and_deep_paths(server, merged):
    deep = "/" + DEEP_DIR + "/leaf.txt"
    assert len(deep) > 300
    f = facts(server, merged[0],
              f"echo long=$(cat /opt/m/long/{LONG_NAME}); echo long-len=$(ls /opt/m/long | wc -L);"
              f"echo deep=$(cat {deep});"
              f"echo gnu=$(cat /opt/m/gnu/{GNU_NAME}); echo gnu-link=$(cat /opt/m/gnu/{GNU_LINK});"
              f"echo gnu-inodes=$(stat -c %i /opt/m/gnu/{GNU_NAME} /opt/m/gnu/{GNU_LINK} | uniq | wc -l);"
              f"echo gnu-sym=$(cat /opt/m/gnu/longsym)")
    assert f == {"long": "long name", "long-len": "200", "deep": "deep leaf", "gnu": "gnu long",
                 "gnu-link": "gnu long", "gnu-inodes": "1", "gnu-sym": "gnu long"}


# -- archives -----------------------------------------------------------------------------------
def _two_layer_image(marker: str) -> oci.Image:
    """busybox, then a layer adding /etc/greeting and whiting out /etc/layer: wrong layer
    order or a missed whiteout shows."""
    return oci.Image([oci.busybox_layer(), [oci.directory("etc"), oci.file("etc/greeting", marker + "\n"),
                                            oci.whiteout("etc/layer")]])


@pytest.mark.parametrize("compress", [None, "gzip"])
def test_docker_save_archive(server, built, work, compress):
    img = _two_layer_image("from docker save")
    path = os.path.join(work, f"docker-save-{compress}.tar" + (".gz" if compress else ""))
    oci.write_docker_save(path, [(["e2e/saved:v1"], img)], compress=compress)
    ref = f"oci-e2e-save-{compress or 'plain'}:1"
    build(server, built, ref, path)
    f = facts(server, ref, "echo g=$(cat /etc/greeting); [ -e /etc/layer ] && echo layer=present || echo layer=gone")
    assert f == {"g": "from docker save", "layer": "gone"}


def test_docker_save_with_two_images_needs_a_name(server, built, work):
    one, two = _two_layer_image("save one"), _two_layer_image("save two")
    path = os.path.join(work, "docker-save-two.tar")
    oci.write_docker_save(path, [(["e2e/one:v1"], one), (["e2e/two:v2", "e2e/two:latest"], two)])
    build(server, built, "oci-e2e-save-two:1", path + ":e2e/two:v2")
    assert greeting(server, "oci-e2e-save-two:1") == "save two"
    build(server, built, "oci-e2e-save-two:2", "docker-archive:" + path + ":v1")
    assert greeting(server, "oci-e2e-save-two:2") == "save one"
    err = build_fails(server, "oci-e2e-save-two:3", path)
    assert "several images" in err, err


def test_docker_save_errors_name_the_archive(server, work):
    img = _two_layer_image("x")
    path = os.path.join(work, "docker-save-errors.tar")
    oci.write_docker_save(path, [(["e2e/one:v1"], img), (["e2e/two:v1"], img)])
    for source in (path, path + ":e2e/three:v1"):
        err = build_fails(server, "oci-e2e-save-err:1", source)
        assert path in err and "warren-build-" not in err, err


def test_oci_archive(server, built, work):
    img = _two_layer_image("from an OCI archive")
    layout = oci.write_oci_layout(os.path.join(work, "archive-layout"), [("v1", img)])
    path = oci.write_oci_archive(os.path.join(work, "image.oci.tar.gz"), layout, compress="gzip")
    with open(path, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    build(server, built, "oci-e2e-ociarchive:1", "oci-archive:" + path)
    f = facts(server, "oci-e2e-ociarchive:1", "echo g=$(cat /etc/greeting); ls /etc/layer 2>/dev/null; echo end=1")
    assert f == {"g": "from an OCI archive", "end": "1"}
    assert _layers(server)["oci-e2e-ociarchive:1"]["source"].endswith("@" + img.digest)


@pytest.mark.parametrize("dest", ["oci", "oci-archive", "docker-archive"])
def test_images_written_by_skopeo(server, built, work, dest):
    """Layouts and archives as a real tool writes them (skopeo, from our layout; no network)."""
    img = _two_layer_image(f"written by skopeo as {dest}")
    src = oci.write_oci_layout(os.path.join(work, f"skopeo-src-{dest}"), [("v1", img)])
    out = os.path.join(work, f"skopeo-{dest}" + ("" if dest == "oci" else ".tar"))
    name = {"oci": "v1", "oci-archive": "v1", "docker-archive": "e2e/skopeo:v1"}[dest]
    registry_util.skopeo_copy(f"oci:{src}:v1", f"{dest}:{out}:{name}", scratch=work)
    ref = f"oci-e2e-skopeo-{dest}:1"
    build(server, built, ref, f"{out}:v1")  # by tag
    f = facts(server, ref, "echo g=$(cat /etc/greeting); [ -e /etc/layer ] && echo layer=present || echo layer=gone")
    assert f == {"g": f"written by skopeo as {dest}", "layer": "gone"}
    # One image in it: no name needed either.
    assert build(server, built, ref.replace(":1", ":2"), out) == build(server, built, ref.replace(":1", ":3"), out)
    assert greeting(server, ref.replace(":1", ":2")) == f"written by skopeo as {dest}"


def test_docker_archive_name_matches_familiar_form(server, built, work):
    img = _two_layer_image("familiar name")
    src = oci.write_oci_layout(os.path.join(work, "skopeo-src-familiar"), [("v1", img)])
    out = os.path.join(work, "skopeo-familiar.tar")
    registry_util.skopeo_copy(f"oci:{src}:v1", f"docker-archive:{out}:e2e/skopeo:v1",
                              "--additional-tag=e2e/skopeo:other", scratch=work)
    build(server, built, "oci-e2e-familiar:1", out + ":e2e/skopeo:v1")
    assert greeting(server, "oci-e2e-familiar:1") == "familiar name"


# -- platforms and names ------------------------------------------------------------------------
def _platform_images():
    right = simple_image(f"platform {HOST_ARCH}", arch=HOST_ARCH)
    wrong = simple_image(f"platform {OTHER_ARCH}", arch=OTHER_ARCH)
    s390x = simple_image("platform s390x", arch="s390x")
    return right, wrong, s390x


@pytest.mark.parametrize("shape", ["nested-index", "flat-index-json"])
def test_manifest_list_chooses_host_platform(server, built, work, shape):
    right, wrong, s390x = _platform_images()
    layout = os.path.join(work, f"platforms-{shape}")
    if shape == "nested-index":  # index.json -> image index -> per-platform manifests
        oci.write_oci_layout(layout, [("multi", oci.Index([wrong, s390x, right]))])
    else:  # index.json itself lists the platforms, no names
        oci.write_oci_layout(layout, [(None, wrong), (None, s390x), (None, right)], with_platform=True)
    ref = f"oci-e2e-platform-{shape}:1"
    build(server, built, ref, layout)
    assert greeting(server, ref) == f"platform {HOST_ARCH}"
    assert _layers(server)[ref]["source"].endswith("@" + right.digest)


def test_manifest_list_without_host_platform_fails(server, work):
    _, wrong, s390x = _platform_images()
    layout = oci.write_oci_layout(os.path.join(work, "platforms-none"), [("multi", oci.Index([wrong, s390x]))])
    err = build_fails(server, "oci-e2e-platform-none:1", layout)
    assert f"linux/{HOST_ARCH}" in err and f"linux/{OTHER_ARCH}" in err and "linux/s390x" in err, err


def test_layout_with_two_images_picked_by_name(server, built, work):
    alpha, beta = simple_image("image alpha"), simple_image("image beta")
    layout = oci.write_oci_layout(os.path.join(work, "two-names"),
                                  [("alpha", alpha), ("example.com/e2e/img:beta", beta)])
    build(server, built, "oci-e2e-names:alpha", layout + ":alpha")
    assert greeting(server, "oci-e2e-names:alpha") == "image alpha"
    build(server, built, "oci-e2e-names:beta-tag", layout + ":beta")
    build(server, built, "oci-e2e-names:beta-full", layout + ":example.com/e2e/img:beta")
    assert greeting(server, "oci-e2e-names:beta-tag") == "image beta"
    assert greeting(server, "oci-e2e-names:beta-full") == "image beta"
    # No name: a clear error naming both choices.
    err = build_fails(server, "oci-e2e-names:none", layout)
    assert "alpha" in err and "example.com/e2e/img:beta" in err and "PATH:NAME" in err, err
    err = build_fails(server, "oci-e2e-names:gamma", layout + ":gamma")
    assert "gamma" in err and "not found" in err, err


# -- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_nonexistent_path(server, work, kind):
    missing = os.path.join(work, "no-such-layout") if kind == "absolute" else "./no-such-layout"
    # In an empty network namespace: whatever Warren makes of the path, nothing leaves the host.
    err = build_fails(server, f"oci-e2e-missing-{kind}:1", missing, argv_prefix=("unshare", "--net"))
    assert "no-such-layout" in err and "docker.io" not in err and "resolve" not in err.lower(), err
    assert "not found" in err.lower() or "no such" in err.lower() or "does not exist" in err.lower(), err


def test_bad_registry_reference(server):
    # Rejected before any request (run without a network all the same).
    err = build_fails(server, "oci-e2e-badref:1", "127.0.0.1:1/E2E/Upper:v1", argv_prefix=("unshare", "--net"))
    assert "lower-case" in err, err
    err = build_fails(server, "oci-e2e-badref:2", "127.0.0.1:1/e2e/img@sha256:abc", argv_prefix=("unshare", "--net"))
    assert "digest" in err, err


def test_not_an_image(server, work):
    empty = os.path.join(work, "not-an-image")
    os.makedirs(empty, exist_ok=True)
    with open(os.path.join(empty, "README"), "w") as f:
        f.write("just a directory\n")
    err = build_fails(server, "oci-e2e-notimage:1", empty)
    assert empty in err and "index.json" in err and "manifest.json" in err, err
    # A file that is no archive at all.
    err = build_fails(server, "oci-e2e-notimage:2", os.path.join(empty, "README"))
    assert "README" in err and "tar" in err, err


def _corrupt_copy(work: str, name: str, img: oci.Image, how) -> str:
    layout = oci.write_oci_layout(os.path.join(work, name), [("v1", img)])
    how(oci.blob_path(layout, img.layers[-1].blob.digest), img)
    return layout


def _truncate(p, img):
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size // 2)


def _garbage(p, img):
    with open(p, "wb") as f:
        f.write(b"this is not a tar archive at all\n" * 40)


def _remove(p, img):
    os.unlink(p)


@pytest.mark.parametrize("how", [_truncate, _garbage, _remove], ids=["truncated", "garbage", "missing"])
def test_corrupted_layer_blob(server, work, how):
    big = random.Random(7).randbytes(256 * 1024)  # incompressible: half the gzip is half the data
    img = oci.Image([oci.busybox_layer(), [oci.file("opt/big.bin", big), oci.file("etc/greeting", "x\n")]])
    layout = _corrupt_copy(work, f"corrupt-{how.__name__}", img, how)
    err = build_fails(server, f"oci-e2e-corrupt{how.__name__.replace('_', '-')}:1", layout)
    hexd = img.layers[-1].blob.digest.split(":")[1]
    if how is _remove:
        assert "blob " + img.layers[-1].blob.digest in err and "not found" in err, err
    else:
        assert hexd in err, err  # names the broken blob
        assert re.search(r"truncated|not a readable tar|bad tar|corrupt|digest", err), err


def test_layout_blob_with_wrong_digest(server, work):
    img = oci.Image([oci.busybox_layer(),
                     oci.Layer([oci.file("etc/greeting", "original\n")], compress=False)])

    def tamper(p, img):
        with open(p, "r+b") as f:
            data = f.read()
            i = data.index(b"original\n")
            f.seek(i)
            f.write(b"tampered\n")  # same size, still a valid tar (tar checksums headers only)

    layout = _corrupt_copy(work, "tampered", img, tamper)
    err = build_fails(server, "oci-e2e-tampered:1", layout)
    assert "digest" in err, err


def test_malformed_index_json(server, work):
    layout = oci.write_oci_layout(os.path.join(work, "bad-index"), [("v1", simple_image("x"))])
    with open(os.path.join(layout, "index.json"), "w") as f:
        f.write('{"schemaVersion": 2, "manifests": [')
    err = build_fails(server, "oci-e2e-badindex:1", layout)
    assert "index.json" in err and "JSON" in err, err


# -- --from-tar layer diffs with whiteouts over a base ------------------------------------------
def test_from_tar_whiteouts_hide_base_files(server, built, work):
    F, D = oci.file, oci.directory
    base = oci.Image([oci.busybox_layer(), [
        D("opt/base"), F("opt/base/file-a", "a\n"), F("opt/base/file-b", "b\n"),
        D("opt/base/dir"), F("opt/base/dir/x", "x\n"),
        D("opt/base/opq"), F("opt/base/opq/old", "old\n"), D("opt/base/opq/sub"), F("opt/base/opq/sub/y", "y\n"),
    ]])
    layout = oci.write_oci_layout(os.path.join(work, "tool-base"), [("v1", base)])
    build(server, built, "oci-e2e-toolbase:1", layout)
    # A layer diff as a registry would serve it: OCI whiteouts, gzip.
    diff = oci.layer_tar([oci.whiteout("opt/base/file-a"), oci.whiteout("opt/base/dir"),
                          oci.opaque("opt/base/opq"), F("opt/base/opq/new", "new\n"),
                          D("opt/tool"), F("opt/tool/hello", "from the tool\n")])
    diff_path = os.path.join(work, "tool-diff.tar.gz")
    with open(diff_path, "wb") as f:
        f.write(gzip.compress(diff, mtime=0))
    digests = {}
    for kind in ("tool", "workspace"):
        ref = f"oci-e2e-diff-{kind}:1"
        r = server.cli("image", "build", ref, "--from-tar", diff_path, "--kind", kind, timeout=300)
        built.append(ref)
        assert r.returncode == 0, f"image build --from-tar {diff_path}: {r.stderr}"
        digests[kind] = r.stdout.split()[1]
    # The layer holds overlayfs whiteouts: 0/0 character devices and opaque-marked directories.
    blob = blob_file(server, digests["tool"])
    for p in ("/opt/base/file-a", "/opt/base/dir"):
        wh = erofs_inode(blob, p)
        assert stat.S_ISCHR(wh["mode"]) and wh["rdev"] == (0, 0), (p, wh)
    opq = erofs_inode(blob, "/opt/base/opq")
    assert stat.S_ISDIR(opq["mode"]), opq
    assert opq["xattrs"].get("user.overlay.opaque") == b"y", opq
    assert opq["xattrs"].get("trusted.overlay.opaque") == b"y", opq
    assert erofs_inode(blob, "/opt/base")["xattrs"] == {}  # only the marked directory
    script = ("cd /opt/base; for p in file-a file-b dir dir/x opq/old opq/sub opq/new; do"
              "  [ -e $p ] && echo $p=yes || echo $p=no; done;"
              "echo opq-ls=$(ls -A opq); echo tool=$(cat /opt/tool/hello 2>/dev/null)")
    # Without the diff: the base as it is.
    f = facts(server, "oci-e2e-toolbase:1", script)
    assert f["file-a"] == f["dir/x"] == f["opq/old"] == f["opq/sub"] == "yes" and f["opq/new"] == "no", f
    for flag in ("--tool", "--workspace"):
        kind = flag.strip("-")
        f = facts(server, "oci-e2e-toolbase:1", script, flag, f"oci-e2e-diff-{kind}:1")
        assert f == {"file-a": "no", "file-b": "yes", "dir": "no", "dir/x": "no", "opq/old": "no",
                     "opq/sub": "no", "opq/new": "yes", "opq-ls": "new", "tool": "from the tool"}, (flag, f)


# -- registries -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reg_http(work):
    with Registry("http", base_dir=work) as reg:
        yield reg


@pytest.fixture(scope="module")
def reg_https(work):
    with Registry("https", base_dir=work) as reg:
        yield reg


@pytest.fixture(scope="module")
def reg_token(work):
    with Registry("token", base_dir=work) as reg:
        yield reg


@pytest.fixture(scope="module")
def pushed_layout(work):
    """A layout with `v1` (two layers, a whiteout) and `multi` (an index over three platforms)."""
    right, wrong, s390x = _platform_images()
    v1 = _two_layer_image("pulled from a registry")
    layout = oci.write_oci_layout(os.path.join(work, "push-layout"),
                                  [("v1", v1), ("multi", oci.Index([wrong, s390x, right]))])
    return layout, v1, right


def _check_pulled(server, ref: str, marker: str = "pulled from a registry") -> None:
    f = facts(server, ref, "echo g=$(cat /etc/greeting); [ -e /etc/layer ] && echo layer=present || echo layer=gone")
    assert f == {"g": marker, "layer": "gone"}, f


def test_registry_http_pull(server, built, reg_http, pushed_layout):
    layout, v1, _ = pushed_layout
    digest = reg_http.push(layout, "v1", "e2e/plain")
    assert digest == v1.digest  # skopeo kept our manifest byte for byte
    build(server, built, "oci-e2e-reg-http:1", reg_http.ref("e2e/plain", "v1"))
    _check_pulled(server, "oci-e2e-reg-http:1")
    src = _layers(server)["oci-e2e-reg-http:1"]["source"]
    assert src == f"oci:{reg_http.host}/e2e/plain:v1@{v1.digest}", src
    # docker:// prefix, as skopeo writes it
    build(server, built, "oci-e2e-reg-http:2", "docker://" + reg_http.ref("e2e/plain", "v1"))


def test_registry_pull_by_digest(server, built, reg_http, pushed_layout):
    layout, v1, _ = pushed_layout
    digest = reg_http.push(layout, "v1", "e2e/bydigest")
    ref = reg_http.ref("e2e/bydigest", digest=digest)
    build(server, built, "oci-e2e-reg-digest:1", ref)
    _check_pulled(server, "oci-e2e-reg-digest:1")
    # A digest the registry does not have.
    missing = "sha256:" + "0" * 64
    err = build_fails(server, "oci-e2e-reg-digest:2", reg_http.ref("e2e/bydigest", digest=missing))
    assert missing in err or "not found" in err.lower(), err


def test_registry_unknown_tag_and_repo(server, reg_http, pushed_layout):
    reg_http.push(pushed_layout[0], "v1", "e2e/known")
    err = build_fails(server, "oci-e2e-reg-unknown:1", reg_http.ref("e2e/known", "no-such-tag"))
    assert "no-such-tag" in err and "not found" in err, err
    err = build_fails(server, "oci-e2e-reg-unknown:2", reg_http.ref("e2e/no-such-repo", "v1"))
    assert "e2e/no-such-repo" in err, err


def test_registry_manifest_list(server, built, reg_http, pushed_layout):
    layout, _, right = pushed_layout
    index_digest = reg_http.push(layout, "multi", "e2e/multi", all_platforms=True)
    assert reg_http.manifest("e2e/multi", "multi") == (oci.MT_OCI_INDEX, index_digest)
    build(server, built, "oci-e2e-reg-multi:1", reg_http.ref("e2e/multi", "multi"))
    assert greeting(server, "oci-e2e-reg-multi:1") == f"platform {HOST_ARCH}"
    assert _layers(server)["oci-e2e-reg-multi:1"]["source"].endswith("@" + right.digest)
    # The index by digest chooses the same way.
    build(server, built, "oci-e2e-reg-multi:2", reg_http.ref("e2e/multi", digest=index_digest))
    assert greeting(server, "oci-e2e-reg-multi:2") == f"platform {HOST_ARCH}"


def test_registry_docker_media_types(server, built, reg_http, pushed_layout):
    """Docker's manifest v2 schema 2 and manifest list, as Docker Hub serves most images."""
    layout, _, right = pushed_layout
    d1 = reg_http.push(layout, "v1", "e2e/docker", fmt="v2s2")
    assert reg_http.manifest("e2e/docker", "v1") == (
        "application/vnd.docker.distribution.manifest.v2+json", d1)
    build(server, built, "oci-e2e-reg-docker:1", reg_http.ref("e2e/docker", "v1"))
    _check_pulled(server, "oci-e2e-reg-docker:1")
    d2 = reg_http.push(layout, "multi", "e2e/docker", all_platforms=True, fmt="v2s2")
    assert reg_http.manifest("e2e/docker", "multi") == (
        "application/vnd.docker.distribution.manifest.list.v2+json", d2)
    build(server, built, "oci-e2e-reg-docker:2", reg_http.ref("e2e/docker", "multi"))
    assert greeting(server, "oci-e2e-reg-docker:2") == f"platform {HOST_ARCH}"


def test_registry_https_with_ca(server, built, reg_https, pushed_layout):
    reg_https.push(pushed_layout[0], "v1", "e2e/tls")
    ref = reg_https.ref("e2e/tls", "v1")
    build(server, built, "oci-e2e-reg-tls:1", ref, "--registry-ca", reg_https.ca_file)
    _check_pulled(server, "oci-e2e-reg-tls:1")
    build(server, built, "oci-e2e-reg-tls:2", ref, env={"WARREN_REGISTRY_CA": reg_https.ca_file})
    _check_pulled(server, "oci-e2e-reg-tls:2")


def test_registry_https_without_ca_fails(server, built, reg_https, pushed_layout):
    reg_https.push(pushed_layout[0], "v1", "e2e/tls-noca")
    ref = reg_https.ref("e2e/tls-noca", "v1")
    err = build_fails(server, "oci-e2e-reg-noca:1", ref)
    assert reg_https.host in err, err
    # A CA that did not sign the registry's certificate is no better.
    other = os.path.join(reg_https.dir, "other-ca")
    os.makedirs(other, exist_ok=True)
    _, other_crt = registry_util.make_ca(other, "unrelated")
    build_fails(server, "oci-e2e-reg-noca:2", ref, "--registry-ca", other_crt)
    # --insecure-registry skips verification on purpose.
    build(server, built, "oci-e2e-reg-noca:3", ref, "--insecure-registry")
    _check_pulled(server, "oci-e2e-reg-noca:3")


def test_registry_https_without_ca_names_the_certificate_problem(server, reg_https, pushed_layout):
    reg_https.push(pushed_layout[0], "v1", "e2e/tls-noca")
    err = build_fails(server, "oci-e2e-reg-noca-msg:1", reg_https.ref("e2e/tls-noca", "v1"))
    assert re.search(r"certificate|SSL|TLS", err), err


@pytest.fixture(scope="module")
def reg_basic(work):
    with Registry("basic", base_dir=work) as reg:
        yield reg


def test_registry_basic_auth(server, built, reg_basic, pushed_layout):
    reg_basic.push(pushed_layout[0], "v1", "e2e/basic")
    ref = reg_basic.ref("e2e/basic", "v1")
    build(server, built, "oci-e2e-reg-basic:1", ref,
          env={"WARREN_REGISTRY_AUTH": f"{reg_basic.user}:{reg_basic.password}"})
    _check_pulled(server, "oci-e2e-reg-basic:1")
    err = build_fails(server, "oci-e2e-reg-basic:2", ref, env={"WARREN_REGISTRY_AUTH": reg_basic.user + ":nope"})
    assert "refused the credentials" in err, err
    err = build_fails(server, "oci-e2e-reg-basic:3", ref)
    assert "needs credentials" in err and "WARREN_REGISTRY_AUTH" in err, err


def test_registry_corrupted_blob_is_refused(server, reg_http, work):
    img = oci.Image([oci.busybox_layer(), [oci.file("etc/greeting", "to be corrupted\n")]])
    layout = oci.write_oci_layout(os.path.join(work, "reg-corrupt"), [("v1", img)])
    reg_http.push(layout, "v1", "e2e/corrupt")
    # Flip one byte of the layer in the registry's own storage: it serves it as it is.
    hexd = img.layers[1].blob.digest.split(":")[1]
    data_file = os.path.join(reg_http.dir, "storage", "docker", "registry", "v2", "blobs", "sha256",
                             hexd[:2], hexd, "data")
    with open(data_file, "r+b") as f:
        blob = bytearray(f.read())
        blob[len(blob) // 2] ^= 0xFF
        f.seek(0)
        f.write(blob)
    err = build_fails(server, "oci-e2e-reg-corrupt:1", reg_http.ref("e2e/corrupt", "v1"))
    assert img.layers[1].blob.digest in err and "corrupt" in err, err


def test_registry_repeated_layer_and_default_tag(server, built, reg_http, work):
    """The same blob twice in one manifest (as empty layers often are); no tag means latest."""
    same = oci.Layer([oci.file("etc/greeting", "twice\n")])
    img = oci.Image([oci.busybox_layer(), same, same])
    layout = oci.write_oci_layout(os.path.join(work, "reg-repeat"), [("latest", img)])
    reg_http.push(layout, "latest", "e2e/repeat")
    build(server, built, "oci-e2e-reg-repeat:1", f"{reg_http.host}/e2e/repeat")
    assert greeting(server, "oci-e2e-reg-repeat:1") == "twice"


def test_registry_token_auth(server, built, reg_token, pushed_layout):
    reg_token.push(pushed_layout[0], "v1", "e2e/private")
    ts = reg_token.token_server
    seen = len(ts.requests)
    ref = reg_token.ref("e2e/private", "v1")
    build(server, built, "oci-e2e-reg-token:1", ref,
          env={"WARREN_REGISTRY_AUTH": f"{reg_token.user}:{reg_token.password}"})
    _check_pulled(server, "oci-e2e-reg-token:1")
    mine = ts.requests[seen:]
    assert mine and all(r["granted"] and r["user"] == reg_token.user for r in mine), mine
    assert any("repository:e2e/private:pull" in r["scope"] for r in mine), mine
    assert all(r["service"] == Registry.SERVICE for r in mine), mine


@pytest.mark.parametrize("auth", ["wrong-password", "no-credentials"])
def test_registry_token_auth_refused(server, reg_token, pushed_layout, auth):
    reg_token.push(pushed_layout[0], "v1", "e2e/private")
    env = {"WARREN_REGISTRY_AUTH": f"{reg_token.user}:not-the-password"} if auth == "wrong-password" else {}
    seen = len(reg_token.token_server.requests)
    err = build_fails(server, f"oci-e2e-reg-refused-{auth}:1", reg_token.ref("e2e/private", "v1"), env=env)
    assert re.search(r"refused|unauthori[sz]ed|credentials|401", err, re.I), err
    assert reg_token.token_server.requests[seen:], "Warren never asked the token realm"
    assert not any(r["granted"] for r in reg_token.token_server.requests[seen:])


def test_tools_present():
    """The registry tests fail (not skip) when their tools are missing."""
    registry_util.require_tools("docker-registry", "skopeo", "openssl")
    for t in ("dump.erofs", "unshare"):
        if not shutil.which(t):
            pytest.fail(f"{t} is not installed")
