"""Host-side file API abuse (THREATS B.1 #4-#7): the occupant plants symlinks, `..` paths,
FIFOs, devices, huge sparse files and hard links where the harness will read or write.

The daemon's admin token (DATA_DIR/admin.token) is the prize: a path that resolved on the
host would hand it over.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from urllib.parse import quote

import pytest

import e2e_util as u
from sec_util import healthy, server_rss_kb


@pytest.fixture
def sb(make_sandbox):
    return make_sandbox()


def _no_token(server, r, what):
    assert server.token.encode() not in r.body, f"{what}: the admin token came back: {r!r}"


def test_symlink_to_host_shadow(sb, server):
    res = sb.sh("ln -s /etc/shadow /tmp/shadowlink && ln -s ../../../../../../etc/shadow /tmp/rel")
    assert res["exit_code"] == 0, res
    try:
        host_shadow = open("/etc/shadow", "rb").read()
    except OSError:
        host_shadow = b""
    for p in ("/tmp/shadowlink", "/tmp/rel", "/etc/shadow"):
        r = sb.get(p)
        if host_shadow:
            assert r.body != host_shadow and (host_shadow[:40] not in r.body), f"GET {p} returned the host's /etc/shadow"
        assert r.status in (200, 404), r


def test_symlink_to_host_only_path(sb, server):
    token_path = os.path.join(server.data_dir, "admin.token")
    assert os.path.exists(token_path)
    res = sb.sh(f"ln -s {token_path} /tmp/tok && ln -s {server.data_dir} /tmp/datadir")
    assert res["exit_code"] == 0, res
    for p in ("/tmp/tok", "/tmp/datadir/admin.token", token_path):
        r = sb.get(p)
        _no_token(server, r, f"GET {p}")
        assert r.status == 404, r


@pytest.mark.parametrize("prefix", [
    "/../../../../../../..", "/tmp/../../../../..", "/proc/self/root", "/proc/1/root",
    "/proc/self/cwd/../../../..", "/proc/1/cwd/../../..", "/dev/../../..", "/proc/self/root/../../..",
])
def test_traversal_paths(sb, server, prefix):
    token_path = os.path.join(server.data_dir, "admin.token")
    r = sb.get(prefix + token_path)
    _no_token(server, r, "GET " + prefix + token_path)
    assert 400 <= r.status < 500, r
    host_target = "/var/tmp/" + u.unique("warren-sec-put")
    try:
        w = sb.put(prefix + host_target, b"written-from-a-sandbox")
        assert not os.path.exists(host_target), f"PUT {prefix}{host_target} created a host file"
        assert w.status == 204 or 400 <= w.status < 500, w
    finally:
        if os.path.lexists(host_target):
            os.unlink(host_target)


def test_put_through_planted_symlink(sb, server):
    host_target = "/var/tmp/" + u.unique("warren-sec-link")
    host_dir = "/var/tmp/" + u.unique("warren-sec-dir")
    os.mkdir(host_dir)
    try:
        res = sb.sh(f"ln -s {host_target} /tmp/out && ln -s {host_dir} /tmp/outdir")
        assert res["exit_code"] == 0, res
        sb.put("/tmp/out", b"pwned")
        sb.put("/tmp/outdir/file", b"pwned")
        assert not os.path.exists(host_target), "PUT followed a planted symlink onto the host"
        assert os.listdir(host_dir) == [], "PUT wrote into a host directory"
    finally:
        if os.path.lexists(host_target):
            os.unlink(host_target)
        shutil.rmtree(host_dir, ignore_errors=True)


def test_get_fifo_is_bounded(sb, server):
    assert sb.sh("mkfifo /tmp/fifo && ln -s /tmp/fifo /tmp/fifolink")["exit_code"] == 0
    for p in ("/tmp/fifo", "/tmp/fifolink"):
        t = time.time()
        r = sb.get(p, timeout=60)
        assert time.time() - t < 10, f"GET {p} took {time.time() - t:.1f}s"
        assert 400 <= r.status < 500, r
    assert sb.alive()


def test_put_fifo_is_bounded(sb, server):
    """The agent opens the target with O_WRONLY and no O_NONBLOCK: on a FIFO with no reader
    that open blocks the agent's only thread forever."""
    assert sb.sh("mkfifo /tmp/fifo")["exit_code"] == 0
    t = time.time()
    try:
        r = sb.put("/tmp/fifo", b"x", timeout=45)
        status = r.status
    except OSError as e:  # the HTTP client gave up
        status = repr(e)
    took = time.time() - t
    assert took < 30, f"PUT to a FIFO did not return for {took:.0f}s (status {status})"
    assert sb.alive(), "the sandbox's agent is wedged after a PUT to a FIFO"


def test_put_fifo_storm_does_not_stall_the_daemon(make_sandbox, server):
    """The harness writing result files the occupant replaced with FIFOs: many concurrent
    PUTs each hold a daemon worker; other sandboxes must keep being served."""
    a = make_sandbox()
    b = make_sandbox(install=False)
    n = 80
    assert a.sh(f"for i in $(seq 1 {n}); do mkfifo /tmp/f$i; done")["exit_code"] == 0
    results = {}

    def put(i):
        t = time.time()
        try:
            results[i] = (a.put(f"/tmp/f{i}", b"x", timeout=200).status, time.time() - t)
        except OSError as e:
            results[i] = (repr(e), time.time() - t)

    threads = [threading.Thread(target=put, args=(i,), daemon=True) for i in range(1, n + 1)]
    for th in threads:
        th.start()
    time.sleep(3)
    try:
        t = time.time()
        ok = b.alive()
        took = time.time() - t
        assert ok and took < 20, f"another sandbox was not served for {took:.0f}s during the FIFO storm"
        t = time.time()
        r = server.http("GET", f"/v1/sandboxes/{b.id}/files?path=/etc/passwd", timeout=30)
        assert r.status == 200 and time.time() - t < 20, r
    finally:
        for th in threads:
            th.join(timeout=200)
    assert healthy(server)


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/tmp/zlink", "/proc/self/fd/0", "/dev/pts/ptmx"])
def test_get_devices_refused(sb, server, path):
    assert sb.sh("ln -sf /dev/zero /tmp/zlink")["exit_code"] == 0
    t = time.time()
    r = sb.get(path, timeout=60)
    assert time.time() - t < 10, f"GET {path} took {time.time() - t:.1f}s"
    assert r.status != 200 or len(r.body) <= 64 << 20, r
    assert 400 <= r.status < 500, r
    assert sb.alive()


def test_get_huge_sparse_and_endless_files(sb, server):
    """A 100 GiB sparse file is refused by size; /proc/self/pagemap reports size 0 but would
    stream 256 GiB: the cap has to hold while reading, not only from st_size."""
    assert sb.sh("truncate -s 100G /tmp/sparse && truncate -s 65M /tmp/sparse65")["exit_code"] == 0
    rss0 = server_rss_kb(server)
    for p in ("/tmp/sparse", "/tmp/sparse65", "/proc/self/pagemap", "/proc/1/pagemap"):
        t = time.time()
        r = sb.get(p, timeout=120)
        took = time.time() - t
        assert took < 30, f"GET {p} took {took:.1f}s"
        assert r.status != 200 or len(r.body) <= 64 << 20, f"GET {p}: {len(r.body)} bytes"
        assert r.status == 200 or 400 <= r.status < 500, r
    assert server_rss_kb(server) - rss0 < 256 * 1024, "daemon RSS grew past 256 MiB"
    assert sb.alive()
    assert healthy(server)


def test_hard_link_to_image_file(make_sandbox, server):
    """#7: a hard link to a (shared, read-only) image file, written through the file API,
    changes only this sandbox's copy."""
    busybox = shutil.which("busybox", path="/bin:/usr/bin")
    good = hashlib.sha256(open(busybox, "rb").read()).hexdigest()
    a = make_sandbox()
    res = a.sh("ln /bin/busybox /tmp/hl && ln /etc/passwd /tmp/pw && echo ok")
    assert "ok" in res["stdout"], res
    assert a.put("/tmp/hl", b"junk").status == 204
    assert a.put("/tmp/pw", b"evil::0:0::/:/bin/sh\n").status == 204
    b = make_sandbox(install=False)
    r = b.get("/bin/busybox")
    assert r.status == 200 and hashlib.sha256(r.body).hexdigest() == good
    assert b"evil" not in b.get("/etc/passwd").body
    assert hashlib.sha256(open(busybox, "rb").read()).hexdigest() == good
    assert b.alive()
