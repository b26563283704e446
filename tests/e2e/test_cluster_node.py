"""`warren node`: a cluster node joins through a real etcd, publishes its record under a lease,
takes requests only with the cluster credential, fetches layers from the shared store (the
serve fixture's blob directory stands in for a shared filesystem), runs sandboxes and streams
their output with sequence numbers, and leaves nothing behind when it stops."""
import hashlib
import json
import os
import signal
import tempfile
import time

import pytest

import cluster_util
import e2e_util
from conftest import _scratch_base, _warren_bin, safe_rmtree


@pytest.fixture
def etcd(tmp_path):
    e = cluster_util.Etcd(_scratch_base(), str(tmp_path / "etcd.log"))
    yield e
    e.stop()


@pytest.fixture
def node(etcd, server, tmp_path):
    data_dir = tempfile.mkdtemp(prefix="warren-e2e-node-", dir=_scratch_base())
    n = cluster_util.Node(str(_warren_bin()), etcd, "n1", data_dir, str(tmp_path / "node.log"),
                          ["--layer-store", server.data_dir, "--no-network", "--no-microvm",
                           "--warm-pool", "0", "--label", "zone=a", "--ttl", "3"])
    n.start()
    yield n
    n.stop(signal.SIGKILL)
    # A killed node leaves its sandboxes for adoption: start it again on the same data dir (it
    # reaps what etcd does not record) and stop it cleanly, so nothing is left behind.
    if n.etcd.proc.poll() is None:
        n.start()
        n.stop(signal.SIGTERM)
    leftover = e2e_util.cgroup_dirs_named(_cgroup_parent(data_dir))
    safe_rmtree(data_dir)
    assert not leftover, leftover


def _cgroup_parent(data_dir: str) -> str:
    return "warren-" + hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:8]


def _digest(server, image: str) -> str:
    layers = server.http("GET", "/v1/layers").json
    name, tag = image.split(":")
    for l in layers["layers"] if isinstance(layers, dict) else layers:
        if l["name"] == name and l["tag"] == tag:
            return l["digest"]
    raise AssertionError(f"no layer {image}: {layers}")


def _spec(sandbox_id: str, digest: str) -> dict:
    return {"backend": "container", "id": sandbox_id, "hostname": sandbox_id,
            "layers": [{"digest": digest, "tool": False}], "memory_bytes": 256 << 20,
            "disk_bytes": 256 << 20, "pids": 128, "cpus": 1.0, "open_files": 1024, "env": {},
            "network": {"mode": "none", "allow": []}}


def _exec(argv) -> dict:
    return {"argv": argv, "env": {}, "env_defaults": {}, "cwd": "/", "timeout_ms": 30000,
            "max_output": 1 << 20, "binary": False}


def test_node_joins_serves_only_the_cluster_and_runs_sandboxes(node, etcd, server, image):
    rec = node.record()
    assert rec["address"] == node.url
    assert rec["capacity"]["cpu_milli"] >= 1000 and rec["capacity"]["memory_mb"] > 0
    assert "container" in rec["backends"] and rec["labels"] == {"zone": "a"}
    secret = etcd.get("/warren/cluster/secret")
    assert secret and len(secret) >= 32

    # Only the cluster credential: no token, a tenant's token, the admin token of a serve.
    digest = _digest(server, image)
    for token in (None, "wrong", server.token):
        status, body = node.request("POST", "/node/v1/sandboxes", _spec("c-denied", digest), token)
        assert status == 401, body
    assert node.request("GET", "/healthz")[0] == 200

    # The layer is not on the node yet: it comes from the shared store, verified.
    blob = os.path.join(node.data_dir, "blobs", "sha256", digest[7:])
    assert not os.path.exists(blob)
    status, body = node.request("POST", "/node/v1/sandboxes", _spec("c-1", digest), secret)
    assert status == 201, body
    assert json.loads(body)["host_pid"] > 0
    assert os.path.exists(blob)
    assert e2e_util.wait_until(lambda: digest in (node.record() or {}).get("layers", []),
                               timeout=10)
    assert e2e_util.wait_until(lambda: (node.record() or {}).get("sandboxes") == 1, timeout=10)

    status, body = node.request("PUT", "/node/v1/sandboxes/c-1/execs/e-1",
                                _exec(["sh", "-c", "echo one; echo two >&2; exit 3"]), secret)
    assert status == 201, body
    status, body = node.request("GET", "/node/v1/sandboxes/c-1/execs/e-1/stream?after=0",
                                token=secret)
    assert status == 200
    lines = e2e_util.ndjson_lines(body)
    chunks = [l for l in lines if "result" not in l and not l.get("heartbeat")]
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert all("data_b64" in c for c in chunks)  # exact bytes for the API server's mirror
    result = lines[-1]["result"]
    assert result["exit_code"] == 3 and result["stdout"] == "one\n" and result["stderr"] == "two\n"
    assert lines[-1]["seq"] == chunks[-1]["seq"] + 1

    # Files, and a failure that names the operation (an unknown sandbox) as a wire error.
    status, _ = node.request("PUT", "/node/v1/sandboxes/c-1/files?path=/tmp/x&mode=420",
                             b"hello", secret)
    assert status == 204
    status, body = node.request("GET", "/node/v1/sandboxes/c-1/files?path=/tmp/x", token=secret)
    assert (status, body) == (200, b"hello")
    status, body = node.request("DELETE", "/node/v1/sandboxes/nope", token=secret)
    err = json.loads(body)["error"]
    assert status == 404 and err["code"] == "not_found" and "errno" in err

    status, _ = node.request("DELETE", "/node/v1/sandboxes/c-1", token=secret)
    assert status == 204
    parent = _cgroup_parent(node.data_dir)
    assert not [d for d in e2e_util.cgroup_dirs_named("c-1") if parent in d]


def test_missing_layer_is_a_clear_error(node, etcd):
    secret = etcd.get("/warren/cluster/secret")
    status, body = node.request("POST", "/node/v1/sandboxes", _spec("c-2", "sha256:" + "0" * 64),
                                secret)
    assert status == 500, body
    err = json.loads(body)["error"]
    assert "not in the node's store" in err["message"] and "shared store" in err["message"]
    assert not os.listdir(os.path.join(node.data_dir, "blobs", "sha256"))


def test_clean_stop_leaves_the_cluster_at_once_and_removes_everything(node, etcd, server, image):
    secret = etcd.get("/warren/cluster/secret")
    status, body = node.request("POST", "/node/v1/sandboxes",
                                _spec("c-3", _digest(server, image)), secret)
    assert status == 201, body
    parent = _cgroup_parent(node.data_dir)
    assert e2e_util.cgroup_dirs_named(parent)
    t0 = time.time()
    assert node.stop(signal.SIGTERM) == 0
    # The lease is revoked, not left to expire: the record is gone at once.
    assert node.record() is None and time.time() - t0 < 30
    assert not [d for d in e2e_util.cgroup_dirs_named("c-3") if parent in d]
    assert not e2e_util.mount_points_under(node.data_dir)


def test_killed_node_record_expires_with_its_lease(node, etcd):
    node.stop(signal.SIGKILL)
    assert node.record() is not None  # still there until the TTL (3 s) runs out
    assert e2e_util.wait_until(lambda: node.record() is None, timeout=15)
