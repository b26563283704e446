"""Directories as tar: PUT/GET /v1/sandboxes/{id}/archive (the image's tar, run inside)."""

from __future__ import annotations

import io
import os
import tarfile

import e2e_util as u


def _tar(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data, kind, target in entries:
            ti = tarfile.TarInfo(name)
            if kind == "sym":
                ti.type, ti.linkname = tarfile.SYMTYPE, target
                t.addfile(ti)
            elif kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                t.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o755 if data.startswith(b"#!") else 0o644
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _sandbox(server, image, sandboxes):
    r = server.http("POST", "/v1/sandboxes", {"image": image})
    assert r.status == 201, r
    sandboxes.append(r.json["id"])
    return r.json["id"]


def test_put_and_get_a_directory(server, image, sandboxes):
    sid = _sandbox(server, image, sandboxes)
    body = _tar([("repo/run.sh", b"#!/bin/sh\necho ran\n", "file", None), ("repo/docs", None, "dir", None),
                 ("repo/docs/a.md", b"# a\n", "file", None), ("repo/link", None, "sym", "run.sh")])
    r = server.http("PUT", f"/v1/sandboxes/{sid}/archive?path=/work", body,
                    headers={"Content-Type": "application/x-tar"})
    assert r.status == 204, r
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "/work/repo/link; cat /work/repo/docs/a.md"})
    assert r.json["stdout"] == "ran\n# a\n", r
    r = server.http("GET", f"/v1/sandboxes/{sid}/archive?path=/work/repo")
    assert r.status == 200 and r.headers.get("Content-Type") == "application/x-tar", r
    t = tarfile.open(fileobj=io.BytesIO(r.body))
    names = sorted(n.lstrip("./") for n in t.getnames() if n not in (".", "./"))
    assert names == ["docs", "docs/a.md", "link", "run.sh"], names
    assert t.extractfile(next(m for m in t.getmembers() if m.name.endswith("a.md"))).read() == b"# a\n"


def test_a_hostile_archive_stays_in_the_sandbox(server, image, sandboxes, tmp_path):
    """`..` entries and a symlink to a host-looking path: whatever tar does, it does in the sandbox."""
    marker = tmp_path / "host-marker"
    sid = _sandbox(server, image, sandboxes)
    body = _tar([("../../../../escape-dotdot", b"x", "file", None),
                 ("evil", None, "sym", str(tmp_path)), ("evil/host-marker", b"pwned", "file", None)])
    server.http("PUT", f"/v1/sandboxes/{sid}/archive?path=/tmp/x", body)   # may fail or not
    assert not marker.exists()
    assert not os.path.exists("/escape-dotdot")


def test_archive_errors(server, image, sandboxes, tokens):
    sid = _sandbox(server, image, sandboxes)
    u.assert_error(server.http("GET", f"/v1/sandboxes/{sid}/archive?path=/no/such/dir"), 404, "not_found")
    u.assert_error(server.http("PUT", f"/v1/sandboxes/{sid}/archive?path=/tmp/g", b"not a tar at all" * 64),
                   400, "invalid")
    u.assert_error(server.http("GET", f"/v1/sandboxes/{sid}/archive?path=relative"), 400, "invalid")
    u.assert_error(server.http("GET", f"/v1/sandboxes/{sid}/archive?path=/tmp&x=1"), 400, "invalid")
    _, other = tokens()
    u.assert_error(server.http("GET", f"/v1/sandboxes/{sid}/archive?path=/tmp",
                               headers={"Authorization": "Bearer " + other}), 404, "not_found")
    assert server.http("POST", f"/v1/sandboxes/{sid}/pause").status == 200
    u.assert_error(server.http("GET", f"/v1/sandboxes/{sid}/archive?path=/tmp"), 409, "conflict")
    assert server.http("POST", f"/v1/sandboxes/{sid}/resume").status == 200


def test_sdk_archive_round_trip(server, image, sandboxes):
    sb = server.client().create(image=image)
    sandboxes.append(sb.id)
    sb.put_archive("/srv/data", _tar([("x/y.txt", b"why\n", "file", None)]))
    assert sb.read_file("/srv/data/x/y.txt") == b"why\n"
    names = tarfile.open(fileobj=io.BytesIO(sb.get_archive("/srv/data"))).getnames()
    assert any(n.endswith("x/y.txt") for n in names), names
