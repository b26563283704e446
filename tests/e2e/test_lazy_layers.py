"""Layers loaded on demand (chunked layers, blobfsd): a sandbox starts once its layer's metadata
is on the node and reads only the chunks it touches; failures fail loud.

A `warren serve` of its own publishes chunked layers into a store directory that its node reads
over HTTP from a test server adding latency to every request (a slow shared store). The image is
the fncall runner's Debian userland (python3, gcc, g++: a few hundred MB), exported from the main
server's whole-image blob with fsck.erofs and built again here.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import conftest
import e2e_util as u

DEBIAN = "lazy-debian:1"


class SlowStore(http.server.ThreadingHTTPServer):
    """Serves a layer store directory over HTTP on loopback, sleeping `delay` s per request
    (the store's latency), and counts the requests and bytes each kind of object costs."""

    daemon_threads = True
    # A node fetches with up to 8 workers plus its readers at once: the default listen backlog
    # of 5 would drop connections (a second's SYN retry each), which no real store does.
    request_queue_size = 128

    def __init__(self, root: str):
        self.root, self.delay = root, 0.0
        self.lock = threading.Lock()
        self.requests: dict = {}
        self.bytes: dict = {}
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # Kept-alive connections, as the node's curl handles expect; headers and body are
            # two writes, so no Nagle (a delayed ACK would hold each body up to 40 ms).
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def do_GET(self):
                time.sleep(store.delay)
                path = self.path.split("?")[0].lstrip("/")
                # A manifest is asked for as blobs/sha256:<hex>; everything else by its path.
                path = re.sub(r"^blobs/sha256:", "blobs/sha256/", path)
                full = os.path.realpath(os.path.join(store.root, path))
                if not full.startswith(os.path.realpath(store.root) + "/") or not os.path.isfile(full):
                    self.send_error(404)
                    return
                with open(full, "rb") as f:
                    data = f.read()
                kind = path.split("/")[0]
                with store.lock:
                    store.requests[kind] = store.requests.get(kind, 0) + 1
                    store.bytes[kind] = store.bytes.get(kind, 0) + len(data)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reset(self) -> None:
        with self.lock:
            self.requests, self.bytes = {}, {}


def _export_tree(server, ref: str, dest: str) -> None:
    """The tree of `ref` (a whole EROFS layer of the main server), extracted to `dest`."""
    layers = {f'{l["name"]}:{l["tag"]}': l for l in server.http("GET", "/v1/layers").json["layers"]}
    digest = layers[ref]["digest"]
    blob = os.path.join(server.layer_dir(), "blobs", "sha256", digest.split(":", 1)[1])
    r = subprocess.run(["fsck.erofs", f"--extract={dest}", blob], capture_output=True, text=True)
    assert r.returncode == 0, f"fsck.erofs --extract of {ref}: {r.stderr[-2000:]}"


@pytest.fixture(scope="module")
def lazy(server, runner, tmp_path_factory):
    """A serve publishing chunked layers into a slow store, with the Debian image built in it."""
    base = conftest._scratch_base()
    store_dir = tempfile.mkdtemp(prefix="warren-e2e-lazystore-", dir=base)
    tree = tempfile.mkdtemp(prefix="warren-e2e-lazytree-", dir=base)
    store = SlowStore(store_dir)
    data_dir = tempfile.mkdtemp(prefix="warren-e2e-lazydata-", dir=base)
    srv = conftest.Server(server.bin, data_dir, conftest._free_port(),
                          str(tmp_path_factory.mktemp("warren-lazy") / "server.log"),
                          str(tmp_path_factory.mktemp("warren-lazy-home")))
    srv.extra_args = ["--layer-store", store_dir, "--layer-store-url", store.url,
                      "--layer-format", "chunked", "--layer-cache-size", "2G", "--no-microvm"]
    try:
        srv.start()
        _export_tree(server, runner, tree)
        r = srv.cli("image", "build", DEBIAN, "--from-dir", tree, timeout=900)
        assert r.returncode == 0, r.stderr
        srv.store, srv.store_dir, srv.tree = store, store_dir, tree
        yield srv
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.delete_all_sandboxes()
        srv.stop()
        store.shutdown()
        for d in (data_dir, store_dir, tree):
            conftest.safe_rmtree(d)


def _layer(srv, ref: str) -> dict:
    r = srv.http("GET", "/v1/layers/" + ref)
    assert r.status == 200, r
    return r.json


def _node_stats(srv, digest: str) -> dict:
    lod = srv.http("GET", "/v1/nodes").json["nodes"][0]["layers_on_demand"]
    for l in lod.get("layers", []):
        if l["layer"] == digest:
            return l
    return {}


def _forget_chunks(srv) -> None:
    """A cold node: its chunk cache emptied (with blobfsd restarted so it forgets its index)
    and no trace to prefetch from."""
    pid = int(Path(srv.data_dir, "blobfs", "pid").read_text())
    for sub in ("chunks", "traces"):
        shutil.rmtree(os.path.join(srv.data_dir, sub), ignore_errors=True)
    for sub in ("traces", "packs"):
        shutil.rmtree(os.path.join(srv.store_dir, sub), ignore_errors=True)
    os.kill(pid, signal.SIGKILL)  # the daemon this test's server started
    assert u.wait_until(lambda: _daemon_pid(srv) not in (None, pid), timeout=30), \
        "blobfsd was not restarted"


def _daemon_pid(srv):
    try:
        lod = srv.http("GET", "/v1/nodes").json["nodes"][0]["layers_on_demand"]
        pid = int(Path(srv.data_dir, "blobfs", "pid").read_text())
        return pid if lod.get("daemon_pid") == pid and _stats_ok(srv) else None
    except (OSError, ValueError, KeyError):
        return None


def _stats_ok(srv) -> bool:
    try:
        with open(os.path.join(srv.data_dir, "blobfs", "mnt", ".stats")) as f:
            return bool(json.load(f).get("pid"))
    except (OSError, ValueError):
        return False


def _run(srv, cmd: str) -> tuple:
    """Creates a sandbox of the Debian image, runs `cmd`, returns (seconds, exec result, id)."""
    t0 = time.monotonic()
    r = srv.http("POST", "/v1/sandboxes", {"image": DEBIAN})
    assert r.status == 201, r
    sid = r.json["id"]
    e = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd}, timeout=300)
    return time.monotonic() - t0, e, sid


def test_chunked_image_is_published_as_metadata_and_chunks(lazy):
    layer = _layer(lazy, DEBIAN)
    assert layer["format"] == "chunked", layer
    assert layer["chunks"] > 100, layer  # a few hundred MB in 1 MiB chunks
    # The metadata a node fetches before the first command is a small part of the layer.
    assert layer["meta_bytes"] < layer["chunk_bytes"] / 20, layer
    r = lazy.cli("image", "inspect", DEBIAN)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["digest"] == layer["digest"]


def test_first_command_needs_a_small_part_of_the_layer_and_beats_copying_it(lazy):
    layer = _layer(lazy, DEBIAN)
    digest = layer["digest"]
    _forget_chunks(lazy)
    lazy.store.delay = 0.005
    lazy.store.reset()
    try:
        took, e, sid = _run(lazy, "python3 -c 'print(1)'")
        assert e.status == 200 and e.json["stdout"] == "1\n", e
        # The node's report is refreshed every half second.
        fetched = u.wait_until(lambda: _node_stats(lazy, digest).get("fetched_bytes", 0),
                               timeout=10)
        # Copying the whole layer first, through the same store: every chunk, 8 at a time.
        t0 = time.monotonic()
        urls = [f"{lazy.store.url}/chunks/sha256/{d.name}/{c.name}"
                for d in Path(lazy.store_dir, "chunks", "sha256").iterdir() for c in d.iterdir()]

        def get(url):
            with urllib.request.urlopen(url) as resp:
                return len(resp.read())
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            copied = sum(pool.map(get, urls))
        copy = time.monotonic() - t0
        assert copied >= layer["chunk_bytes"]
    finally:
        lazy.store.delay = 0.0
    share = fetched / layer["chunk_bytes"]
    print(f"\nfirst `python3 -c print(1)`: {took:.2f} s, fetched {fetched >> 20} MiB "
          f"({share:.1%} of {layer['chunk_bytes'] >> 20} MiB); whole copy {copy:.2f} s")
    assert 0 < fetched and share < 0.10, f"fetched {share:.1%} of the layer before the first result"
    assert took < copy, f"first command after {took:.2f} s; copying the layer took {copy:.2f} s"
    lazy.http("DELETE", f"/v1/sandboxes/{sid}")


def test_metrics_and_inspect_show_what_was_fetched(lazy):
    digest = _layer(lazy, DEBIAN)["digest"]
    _, e, sid = _run(lazy, "gcc --version")
    assert e.status == 200 and e.json["exit_code"] == 0, e
    lazy.http("DELETE", f"/v1/sandboxes/{sid}")
    # The node's report is refreshed every half second.
    assert u.wait_until(lambda: _layer(lazy, DEBIAN)["on_demand"], timeout=10)
    on_demand = _layer(lazy, DEBIAN)["on_demand"]
    assert on_demand and on_demand[0]["node"] == "local", on_demand
    assert on_demand[0]["fetched_bytes"] > 0 and on_demand[0]["fetches"] > 0
    m = lazy.http("GET", "/metrics").body.decode()
    for family in ("warren_layer_fetched_bytes_total", "warren_layer_chunk_reads_total",
                   "warren_layer_fetch_seconds_total", "warren_layer_prefetch_hits_total",
                   "warren_layer_page_cached_chunks_total",
                   "warren_chunk_cache_bytes"):
        assert re.search(rf'^{family}\{{[^}}]*\}} \d', m, re.M) or \
            re.search(rf'^{family} \d', m, re.M), f"no {family} in /metrics"
    assert f'layer="{digest}"' in m


def test_killed_daemon_fails_its_sandboxes_and_leaves_nothing_mounted(lazy):
    _, e, victim = _run(lazy, "true")
    assert e.status == 200, e
    pid = int(Path(lazy.data_dir, "blobfs", "pid").read_text())
    os.kill(pid, signal.SIGKILL)  # the daemon this test's server started
    sb = u.wait_until(lambda: (lambda s: s if s.get("state") == "failed" else None)(
        lazy.http("GET", f"/v1/sandboxes/{victim}").json), timeout=30)
    assert sb, "the sandbox of a dead blobfsd was not failed"
    assert "blobfsd" in sb["error"]["message"], sb["error"]
    assert u.wait_until(lambda: _daemon_pid(lazy) not in (None, pid), timeout=30)
    # A new sandbox reads through the new daemon.
    _, e, sid = _run(lazy, "python3 -c 'print(2)'")
    assert e.status == 200 and e.json["stdout"] == "2\n", e
    for s in (victim, sid):
        assert lazy.http("DELETE", f"/v1/sandboxes/{s}").status == 204
    with open("/proc/self/mountinfo") as f:
        mounts = [l for l in f if lazy.data_dir in l]
    assert len(mounts) == 1 and "fuse" in mounts[0], mounts  # the live daemon's, only


def test_corrupt_chunk_fails_the_sandbox_with_the_reason(lazy):
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-corrupt-", dir=conftest._scratch_base()))
    data = os.urandom(3 << 20)
    try:
        conftest._build_rootfs(root)
        (root / "data").write_bytes(data)
        r = lazy.cli("image", "build", "lazy-corrupt:1", "--from-dir", str(root))
        assert r.returncode == 0, r.stderr
    finally:
        conftest.safe_rmtree(str(root))
    # /data's chunks (slices of chunk_size, named by their content) are this layer's alone:
    # corrupt them in the store.
    size = _layer(lazy, "lazy-corrupt:1")["chunk_size"]
    assert size and len(data) % size == 0, size
    for i in range(len(data) // size):
        sha = hashlib.sha256(data[i * size:(i + 1) * size]).hexdigest()
        p = Path(lazy.store_dir, "chunks", "sha256", sha[:2], sha)
        os.chmod(p, 0o600)
        with open(p, "r+b") as f:
            f.seek(4096)
            f.write(b"corrupt")
    r = lazy.http("POST", "/v1/sandboxes", {"image": "lazy-corrupt:1"})
    assert r.status == 201, r
    sid = r.json["id"]
    e = lazy.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "md5sum /data"}, timeout=60)
    # The read fails (EIO), and the node fails the sandbox: the exec ends either way.
    assert e.status != 200 or e.json["exit_code"] != 0, f"a corrupt chunk was read: {e}"
    sb = u.wait_until(lambda: (lambda s: s if s.get("state") == "failed" else None)(
        lazy.http("GET", f"/v1/sandboxes/{sid}").json), timeout=30)
    assert sb and "does not match its digest" in sb["error"]["message"], sb
    lazy.http("DELETE", f"/v1/sandboxes/{sid}")
    lazy.cli("image", "rm", "lazy-corrupt:1")


def test_a_full_cache_evicts_and_every_byte_is_still_right(lazy):
    """The node's chunk cache bounded below what a sandbox reads: chunks are evicted, and what
    the sandbox reads is the image's content, byte for byte."""
    # Restart the node's daemon with a 48 MiB cache: the server passes its flag on restart.
    lazy.stop()
    lazy.extra_args = [a if a != "2G" else "48M" for a in lazy.extra_args]
    lazy.start()
    try:
        big = sorted((p for p in Path(lazy.tree, "usr", "lib").rglob("*")
                      if p.is_file() and not p.is_symlink()), key=lambda p: -p.stat().st_size)[:12]
        assert sum(p.stat().st_size for p in big) > 96 << 20, "the image has too few large files"
        want = {"/" + str(p.relative_to(lazy.tree)): hashlib.md5(p.read_bytes()).hexdigest()
                for p in big}
        _, e, sid = _run(lazy, "md5sum " + " ".join(want))
        assert e.status == 200 and e.json["exit_code"] == 0, e
        got = {l.split()[1]: l.split()[0] for l in e.json["stdout"].splitlines()}
        assert got == want
        cache = lazy.http("GET", "/v1/nodes").json["nodes"][0]["layers_on_demand"]["cache"]
        assert cache["bytes"] <= 48 << 20 and cache["evictions"] > 0, cache
        lazy.http("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        lazy.stop()
        lazy.extra_args = [a if a != "48M" else "2G" for a in lazy.extra_args]
        lazy.start()


def test_a_layer_read_whole_becomes_a_local_file_that_outlives_the_daemon(lazy):
    """Once every chunk of a layer is on the node, later mounts read a plain local file: a
    sandbox made then does not depend on blobfsd."""
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-promote-", dir=conftest._scratch_base()))
    try:
        conftest._build_rootfs(root)
        (root / "data").write_bytes(os.urandom(2 << 20))
        r = lazy.cli("image", "build", "lazy-small:1", "--from-dir", str(root))
        assert r.returncode == 0, r.stderr
    finally:
        conftest.safe_rmtree(str(root))
    digest = _layer(lazy, "lazy-small:1")["digest"]
    r = lazy.http("POST", "/v1/sandboxes", {"image": "lazy-small:1"})
    assert r.status == 201, r
    reader = r.json["id"]
    e = lazy.http("POST", f"/v1/sandboxes/{reader}/exec",
                  {"cmd": "find / -xdev -type f -exec cat {} + > /dev/null"}, timeout=120)
    assert e.status == 200 and e.json["exit_code"] == 0, e
    promoted = Path(lazy.data_dir, "promoted", "sha256", digest.split(":")[1])
    # The node looks for fully cached layers every 30 s.
    assert u.wait_until(promoted.exists, timeout=75), "the layer was never promoted"
    r = lazy.http("POST", "/v1/sandboxes", {"image": "lazy-small:1"})
    assert r.status == 201, r
    local = r.json["id"]
    pid = int(Path(lazy.data_dir, "blobfs", "pid").read_text())
    os.kill(pid, signal.SIGKILL)  # the daemon this test's server started
    # The first sandbox read through the daemon: failed. The second reads the local file.
    assert u.wait_until(lambda: lazy.http("GET", f"/v1/sandboxes/{reader}").json["state"] == "failed",
                        timeout=30)
    e = lazy.http("POST", f"/v1/sandboxes/{local}/exec", {"cmd": "md5sum /data"}, timeout=60)
    assert e.status == 200 and e.json["exit_code"] == 0, e
    assert lazy.http("GET", f"/v1/sandboxes/{local}").json["state"] == "running"
    assert u.wait_until(lambda: _daemon_pid(lazy) not in (None, pid), timeout=30)
    for s in (reader, local):
        lazy.http("DELETE", f"/v1/sandboxes/{s}")
    lazy.cli("image", "rm", "lazy-small:1")
