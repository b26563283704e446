"""Two `warren serve` daemons with different data dirs on one host must not touch each other."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

import conftest
import e2e_util as u


@pytest.fixture
def make_server(server, tmp_path_factory):
    """Starts extra servers (own data dir and port); all stopped and removed after the test."""
    made = []

    def make(start: bool = True) -> conftest.Server:
        data_dir = tempfile.mkdtemp(prefix="warren-e2e-data2-", dir=conftest._scratch_base())
        srv = conftest.Server(server.bin, data_dir, conftest._free_port(),
                              str(tmp_path_factory.mktemp("warren-server-extra") / "server.log"),
                              str(tmp_path_factory.mktemp("warren-home-extra")))
        made.append(srv)
        if start:
            srv.start()
        return srv
    yield make
    for srv in made:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.delete_all_sandboxes()
        srv.stop()
        conftest.safe_rmtree(srv.data_dir)


def _build_image(srv, image: str) -> None:
    root = tempfile.mkdtemp(prefix="warren-e2e-rootfs2-", dir=conftest._scratch_base())
    try:
        conftest._build_rootfs(Path(root))
        r = srv.cli("image", "build", image, "--from-dir", root)
        assert r.returncode == 0, r
    finally:
        conftest.safe_rmtree(root)


def test_starting_a_second_server_keeps_the_first_ones_sandboxes(server, image, sandboxes, make_server):
    r = server.http("POST", "/v1/sandboxes", {"image": image})
    assert r.status == 201, r
    sid = r.json["id"]
    sandboxes.append(sid)
    assert server.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo before"}).json["stdout"] == "before\n"

    make_server()

    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo after"})
    assert r.status == 200 and r.json.get("stdout") == "after\n", \
        f"the first server's sandbox after a second `warren serve` started: {r!r}"


def test_two_servers_give_sandboxes_distinct_host_uids(server, image, make_server):
    """Two fresh daemons: the first sandbox of each must not get the same host uid range."""
    a_srv, b_srv = make_server(), make_server()
    procs = []
    try:
        for srv, secs in ((a_srv, "41"), (b_srv, "42")):
            _build_image(srv, image)
            r = srv.http("POST", "/v1/sandboxes", {"image": image})
            assert r.status == 201, r
            procs.append(subprocess.Popen([srv.bin, "exec", r.json["id"], "--", "sleep", secs], env=srv.env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL))
        a = u.find_sandboxed(["sleep", "41"])
        b = u.find_sandboxed(["sleep", "42"])
        assert a and b, (a, b)
        ua, ub = u.uids(a[0])[0], u.uids(b[0])[0]
        assert ua != ub, f"sandboxes of two servers run as the same host uid {ua}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
