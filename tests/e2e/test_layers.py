"""The three-layer model: base + tools + workspace composed per sandbox, tags that move while
digests do not, and blob garbage collection that never removes a layer in use."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from conftest import _scratch_base, safe_rmtree


def _tree(files: dict) -> str:
    """A directory holding ``files`` ({relpath: text}; executable if it starts with #!)."""
    root = tempfile.mkdtemp(prefix="warren-e2e-layer-", dir=_scratch_base())
    os.chmod(root, 0o755)
    for rel, text in files.items():
        p = Path(root) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        os.chmod(p, 0o755 if text.startswith("#!") else 0o644)
    # Fixed times: a layer keeps file times, so equal trees need equal times to be one blob.
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_700_000_000, 1_700_000_000), follow_symlinks=False)
    os.utime(root, (1_700_000_000, 1_700_000_000))
    return root


@pytest.fixture
def build(server):
    """build(ref, files, kind) -> digest; every tree is removed afterwards, every name too."""
    made, refs = [], []

    def _build(ref: str, files: dict, kind: str) -> str:
        root = _tree(files)
        made.append(root)
        r = server.cli("image", "build", ref, "--from-dir", root, "--kind", kind, timeout=300)
        assert r.returncode == 0, f"image build {ref}: {r.stderr}"
        name, digest = r.stdout.split()
        assert name == ref and digest.startswith("sha256:")
        refs.append(ref)
        return digest

    yield _build
    for ref in refs:
        server.cli("image", "rm", ref)
    for root in made:
        safe_rmtree(root)


def _layers(server) -> dict:
    return {l["ref"]: l for l in server.http("GET", "/v1/layers").json["layers"]}


def _run(server, *spec_and_cmd: str) -> str:
    r = server.cli("run", *spec_and_cmd)
    assert r.returncode == 0, f"warren run {spec_and_cmd}: {r.returncode} {r.stderr}"
    return r.stdout


def _blob(server, digest: str) -> str:
    return os.path.join(server.data_dir, "blobs", "sha256", digest.split(":", 1)[1])


def test_base_two_tools_and_workspace_compose_with_precedence(server, image, build):
    build("lt-a:1", {"opt/tools/a/bin/a": "#!/bin/sh\necho tool-a\n",
                     "etc/shared": "tool-a\n", "etc/only-tools": "tool-a\n"}, "tool")
    build("lt-b:1", {"opt/tools/b/bin/b": "#!/bin/sh\necho tool-b\n",
                     "etc/shared": "tool-b\n", "etc/only-tools": "tool-b\n",
                     "etc/only-b": "b\n"}, "tool")
    build("lt-ws:1", {"work/repo/README": "hello\n", "etc/shared": "workspace\n"}, "workspace")
    kinds = {ref: l["kind"] for ref, l in _layers(server).items()}
    assert kinds["lt-a:1"] == "tool" and kinds["lt-ws:1"] == "workspace"

    out = _run(server, "--image", image, "--tool", "lt-a:1", "--tool", "lt-b:1",
               "--workspace", "lt-ws:1", "--", "sh", "-c",
               "/opt/tools/a/bin/a; /opt/tools/b/bin/b; cat /work/repo/README /etc/shared "
               "/etc/only-tools /etc/only-b /etc/marker")
    # Everything is visible; the workspace wins over tools, the first tool over the second,
    # and the base shows through where nothing covers it.
    assert out.split() == ["tool-a", "tool-b", "hello", "workspace", "tool-a", "b",
                           "warren-e2e-rootfs"]

    # Tool order is the user's: listing b first makes b win.
    out = _run(server, "--image", image, "--tool", "lt-b:1", "--tool", "lt-a:1", "--",
               "cat", "/etc/shared", "/etc/only-tools")
    assert out.split() == ["tool-b", "tool-b"]


def test_sandbox_records_the_digests_it_was_made_from(server, image, build, sandboxes):
    d_tool = build("lt-rec:1", {"opt/tools/rec/x": "x\n"}, "tool")
    sb = server.client().create(image=image, tools=["lt-rec:1"])
    sandboxes.append(sb.id)
    got = server.http("GET", "/v1/sandboxes/" + sb.id).json["layers"]
    assert [(l["role"], l["ref"]) for l in got] == [("tool", "lt-rec:1"), ("base", image)]
    assert got[0]["digest"] == d_tool
    assert got[1]["digest"] == _layers(server)[image]["digest"]


@pytest.mark.serve_only("blob collection in warren serve's store (a cluster's shared store is not swept yet)")
def test_replacing_a_tool_tag_rebuilds_one_layer_and_old_sandboxes_keep_working(
        server, image, build, sandboxes):
    base_digest = _layers(server)[image]["digest"]
    ws = build("lt-upd-ws:1", {"work/task": "task\n"}, "workspace")
    v1 = build("lt-upd:1", {"opt/tools/upd/bin/upd": "#!/bin/sh\necho v1\n"}, "tool")
    old = server.client().create(image=image, tools=["lt-upd:1"], workspace="lt-upd-ws:1")
    sandboxes.append(old.id)
    assert old.run(["/opt/tools/upd/bin/upd"]).stdout == "v1\n"

    v2 = build("lt-upd:1", {"opt/tools/upd/bin/upd": "#!/bin/sh\necho v2\n"}, "tool")
    assert v2 != v1
    after = _layers(server)
    # Only the tool's layer changed: the base and the workspace are the same blobs.
    assert after["lt-upd:1"]["digest"] == v2
    assert after[image]["digest"] == base_digest and after["lt-upd-ws:1"]["digest"] == ws

    new = server.client().create(image=image, tools=["lt-upd:1"], workspace="lt-upd-ws:1")
    sandboxes.append(new.id)
    assert new.run(["/opt/tools/upd/bin/upd"]).stdout == "v2\n"
    # The old sandbox still runs its old tool, and its blob is kept while it exists.
    assert old.run(["sh", "-c", "/opt/tools/upd/bin/upd; cat /work/task"]).stdout == "v1\ntask\n"
    assert os.path.exists(_blob(server, v1))
    old.delete()
    assert not os.path.exists(_blob(server, v1)), "the old tool blob outlived its last user"
    assert os.path.exists(_blob(server, v2))


@pytest.mark.serve_only("blob collection in warren serve's store (a cluster's shared store is not swept yet)")
def test_removed_name_keeps_blob_for_running_sandbox(server, image, build, sandboxes):
    d = build("lt-rm:1", {"opt/tools/rm/f": "still here\n"}, "tool")
    sb = server.client().create(image=image, tools=["lt-rm:1"])
    sandboxes.append(sb.id)
    r = server.cli("image", "rm", "lt-rm:1")
    assert r.returncode == 0, r.stderr
    assert "lt-rm:1" not in _layers(server)
    assert os.path.exists(_blob(server, d))
    assert sb.run(["cat", "/opt/tools/rm/f"]).stdout == "still here\n"
    r = server.cli("create", "--image", image, "--tool", "lt-rm:1")
    assert r.returncode != 0 and "lt-rm:1" in r.stderr
    sb.delete()
    assert not os.path.exists(_blob(server, d))


@pytest.mark.serve_only("blob collection in warren serve's store (a cluster's shared store is not swept yet)")
def test_same_content_under_two_names_is_one_blob(server, build):
    a = build("lt-dup-a:1", {"f": "same\n"}, "tool")
    b = build("lt-dup-b:1", {"f": "same\n"}, "tool")
    assert a == b
    server.cli("image", "rm", "lt-dup-a:1")
    assert os.path.exists(_blob(server, b)), "a blob still named elsewhere was removed"


def test_layer_tar_with_whiteouts_hides_base_files_as_a_tool(server, image, tmp_path, sandboxes):
    """A layer diff (docker/OCI whiteouts) used over a base deletes what it whites out."""
    import io
    import tarfile

    tar = tmp_path / "diff.tar"
    with tarfile.open(tar, "w") as t:
        for name, data in ((".wh.marker", b""), ("etc/.wh.hosts", b"")):
            ti = tarfile.TarInfo(name if name.startswith("etc/") else "etc/" + name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        d = tarfile.TarInfo("home/.wh..wh..opq")
        t.addfile(d, io.BytesIO(b""))
        f = tarfile.TarInfo("home/new")
        f.size = 4
        t.addfile(f, io.BytesIO(b"new\n"))
    r = server.cli("image", "build", "lt-wh:1", "--from-tar", str(tar), "--kind", "tool")
    assert r.returncode == 0, r.stderr
    try:
        # The base has /etc/marker, /etc/hosts and an (empty) /home; make /home non-empty
        # through a workspace to see the opaque marker hide lower content.
        out = _run(server, "--image", image, "--tool", "lt-wh:1", "--", "sh", "-c",
                   "ls -a /etc; echo ---; ls -a /home; cat /home/new")
        etc, home = out.split("---")
        assert "marker" not in etc.split() and "hosts" not in etc.split()
        assert "passwd" in etc.split()
        assert home.split() == [".", "..", "new", "new"]
    finally:
        server.cli("image", "rm", "lt-wh:1")


def test_image_ls_shows_kind_size_and_source(server, build):
    build("lt-ls:1", {"x": "x\n"}, "workspace")
    r = server.cli("image", "ls")
    assert r.returncode == 0
    line = next(l for l in r.stdout.splitlines() if l.startswith("lt-ls:1 "))
    assert "workspace" in line and "dir:" in line
