"""`warren apiserver` over a real etcd and two `warren node`s: the CLI builds an image into the
shared layer store, sandboxes are spread over the nodes (each sandbox names its node), exec
output and files go through the API server to the node, and deleting gives everything back:
no record in etcd, no sandbox on a node, no room reserved."""
import json
import signal
import tempfile

import pytest

import cluster_util
import e2e_util
from conftest import _scratch_base, _warren_bin, safe_rmtree


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = tmp_path_factory.mktemp("cluster-logs")
    scratch = _scratch_base()
    made = []  # (kind, object) to stop, newest first
    etcd = cluster_util.Etcd(scratch, str(logs / "etcd.log"))
    made.append(etcd)
    shared = tempfile.mkdtemp(prefix="warren-e2e-layers-", dir=scratch)
    nodes = []
    try:
        for name in ("n1", "n2"):
            data_dir = tempfile.mkdtemp(prefix=f"warren-e2e-{name}-", dir=scratch)
            n = cluster_util.Node(str(_warren_bin()), etcd, name, data_dir,
                                  str(logs / f"{name}.log"),
                                  ["--layer-store", shared, "--no-network", "--no-microvm",
                                   "--warm-pool", "0"])
            n.start()
            nodes.append(n)
        api_dir = tempfile.mkdtemp(prefix="warren-e2e-api-", dir=scratch)
        home = tempfile.mkdtemp(prefix="warren-e2e-home-", dir=scratch)
        api = cluster_util.ApiServer(str(_warren_bin()), etcd, api_dir, shared,
                                     str(logs / "apiserver.log"), home)
        api.start()
        cluster_util.build_test_image(api)
        yield {"etcd": etcd, "nodes": nodes, "api": api, "shared": shared}
    finally:
        if "api" in locals():
            api.stop()
        for n in nodes:
            n.stop()
            safe_rmtree(n.data_dir)
        etcd.stop()
        safe_rmtree(shared)
        for d in ("api_dir", "home"):
            if d in locals():
                safe_rmtree(locals()[d])


def test_sandboxes_spread_over_nodes_and_run_through_the_api(cluster):
    api, etcd, nodes = cluster["api"], cluster["etcd"], cluster["nodes"]
    status, body = api.request("GET", "/v1/nodes")
    assert status == 200, body
    listed = json.loads(body)
    names = sorted(n["name"] for n in (listed["nodes"] if isinstance(listed, dict) else listed))
    assert names == ["n1", "n2"]

    ids = []
    for _ in range(4):
        status, body = api.request("POST", "/v1/sandboxes", {"image": "c:1"})
        assert status == 201, body
        ids.append(json.loads(body)["id"])
    placed = {}
    for sid in ids:
        status, body = api.request("GET", f"/v1/sandboxes/{sid}")
        sb = json.loads(body)
        assert sb["state"] == "running", sb
        placed[sid] = sb["node"]
    assert sorted(set(placed.values())) == ["n1", "n2"], placed  # spread

    # Exec through the API server, on whichever node holds the sandbox.
    sid = ids[0]
    r = api.cli("exec", sid, "--", "sh", "-c", "echo hi from $(hostname); echo err >&2; exit 5")
    assert r.returncode == 5, r.stderr
    assert r.stdout.startswith("hi from ") and "err" in r.stderr

    # A background exec, then its stream read twice from the start: same lines, same seqs.
    status, body = api.request("POST", f"/v1/sandboxes/{sid}/exec",
                               {"argv": ["sh", "-c", "for i in 1 2 3; do echo $i; done"],
                                "wait": False})
    assert status == 202, body
    exec_id = json.loads(body)["exec_id"]
    first = second = None
    for attempt in range(2):
        status, body = api.request("GET", f"/v1/sandboxes/{sid}/execs/{exec_id}/stream?after=0")
        assert status == 200
        lines = e2e_util.ndjson_lines(body)
        if attempt == 0:
            first = lines
        else:
            second = lines
    assert first == second
    out = "".join(l.get("data", "") for l in first if "result" not in l)
    assert out == "1\n2\n3\n" and first[-1]["result"]["exit_code"] == 0
    # Resuming after the first line gives the rest only (however the output was chunked).
    status, body = api.request("GET",
                               f"/v1/sandboxes/{sid}/execs/{exec_id}/stream?after={first[0]['seq']}")
    rest = e2e_util.ndjson_lines(body)
    assert rest == first[1:]
    assert "".join(l.get("data", "") for l in rest if "result" not in l) == out[len(first[0]["data"]):]

    # Files through the API server.
    r = api.cli("exec", sid, "--", "sh", "-c", "echo content > /tmp/f")
    assert r.returncode == 0, r.stderr
    status, body = api.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/f")
    assert (status, body) == (200, b"content\n")

    for sid in ids:
        status, body = api.request("DELETE", f"/v1/sandboxes/{sid}")
        assert status == 204, body
    assert etcd.keys("/warren/sandboxes/") == []
    for n in nodes:
        assert e2e_util.wait_until(lambda: (n.record() or {}).get("sandboxes") == 0, timeout=10)
        alloc = json.loads(etcd.get(f"/warren/node/{n.name}/alloc") or "{}")
        assert alloc.get("sandboxes", 0) == 0, alloc


def test_a_node_gone_makes_its_sandboxes_lost(cluster):
    api, nodes = cluster["api"], cluster["nodes"]
    status, body = api.request("POST", "/v1/sandboxes", {"image": "c:1"})
    assert status == 201, body
    sb = json.loads(body)
    node = next(n for n in nodes if n.name == sb["node"])
    node.stop(signal.SIGKILL)
    try:
        def lost():
            st, b = api.request("GET", f"/v1/sandboxes/{sb['id']}")
            return json.loads(b) if json.loads(b).get("state") == "lost" else None
        rec = e2e_util.wait_until(lost, timeout=20)
        assert rec and "heartbeat" in rec["reason"], rec
        status, body = api.request("DELETE", f"/v1/sandboxes/{sb['id']}")
        assert status == 204, body
    finally:
        node.start()  # adopts or reaps what the killed run left
