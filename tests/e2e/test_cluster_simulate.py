"""`warren node --simulate N`: simulated nodes join a real etcd and take real creates from a
real API server (placement spreads them, reservations hold and go back, the TTL index ends a
sandbox on time, a command is refused with a clear error), leave when stopped, and
bench/cluster.py runs end to end on them at a small size, so the bench cannot rot."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import cluster_util
from conftest import REPO, _scratch_base, _warren_bin, safe_rmtree


@pytest.fixture
def sim(tmp_path):
    etcd = cluster_util.Etcd(_scratch_base(), str(tmp_path / "etcd.log"))
    scratch = tempfile.mkdtemp(prefix="warren-e2e-sim-", dir=_scratch_base())
    log = open(tmp_path / "sim.log", "ab")
    nodes = subprocess.Popen(
        [str(_warren_bin()), "node", "--simulate", "3", "--name", "sim", "--etcd", etcd.url,
         "--listen", "127.0.0.1:0", "--ttl", "3", "--simulate-cpus", "4",
         "--simulate-memory", "8G"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    layers = os.path.join(scratch, "layers")
    os.makedirs(layers)
    api = cluster_util.ApiServer(str(_warren_bin()), etcd, os.path.join(scratch, "api"), layers,
                                 str(tmp_path / "api.log"), os.path.join(scratch, "home"))
    try:
        deadline = time.time() + 30
        while len(etcd.keys("/warren/node/")) < 3 and time.time() < deadline:
            assert nodes.poll() is None, (tmp_path / "sim.log").read_text()
            time.sleep(0.1)
        api.start()
        root = os.path.join(scratch, "rootfs", "etc")
        os.makedirs(root)
        with open(os.path.join(root, "os-release"), "w") as f:
            f.write("NAME=sim\n")
        r = api.cli("image", "build", "s:1", "--from-dir", os.path.dirname(root))
        assert r.returncode == 0, r.stderr
        yield etcd, nodes, api
    finally:
        api.stop()
        if nodes.poll() is None:
            nodes.terminate()
            nodes.wait(timeout=30)
        etcd.stop()
        safe_rmtree(scratch)


def _nodes(api):
    status, body = api.request("GET", "/v1/nodes")
    assert status == 200, body
    listed = json.loads(body)
    return {n["name"]: n for n in (listed["nodes"] if isinstance(listed, dict) else listed)}


def test_simulated_nodes_take_creates_through_the_api(sim):
    etcd, nodes, api = sim
    listed = _nodes(api)
    assert sorted(listed) == ["sim-000", "sim-001", "sim-002"]
    for n in listed.values():
        assert n["state"] == "ready"
        assert n["capacity"]["cpu_milli"] == 4000 and n["capacity"]["memory_mb"] == 8192
        assert n["labels"]["simulated"] == "true"

    # One call takes a whole job (the unit's largest is 32,000), not more than 50,000.
    status, body = api.request("POST", "/v1/sandboxes:batch",
                               {"count": 50001, "spec": {"image": "s:1"}})
    assert status == 400 and "50000" in json.loads(body)["error"]["message"], body
    status, body = api.request("POST", "/v1/sandboxes:batch",
                               {"count": 12, "spec": {"image": "s:1", "cpu": 1,
                                                      "memory_mb": 256}})
    assert status == 200, body
    made = json.loads(body)
    assert not made["errors"], made["errors"]
    ids = [s["id"] for s in made["sandboxes"]]
    per_node = {}
    for s in made["sandboxes"]:
        assert s["state"] == "running"
        per_node[s["node"]] = per_node.get(s["node"], 0) + 1
    assert sorted(per_node) == ["sim-000", "sim-001", "sim-002"], per_node  # spread
    reserved = sum(n["reserved"]["cpu_milli"] for n in _nodes(api).values())
    assert reserved == 12 * 1000

    # Nothing runs on a simulated node: a command is refused, not answered with made-up output.
    status, body = api.request("POST", f"/v1/sandboxes/{ids[0]}/exec", {"argv": ["true"]})
    assert status == 400, body
    assert "simulated" in json.loads(body)["error"]["message"]

    for sid in ids:
        status, body = api.request("DELETE", f"/v1/sandboxes/{sid}")
        assert status == 204, body
    assert sum(n["reserved"]["cpu_milli"] for n in _nodes(api).values()) == 0
    assert etcd.keys("/warren/sandboxes/") == []

    # A TTL ends the sandbox through the cluster's TTL index, its entry going with the record.
    status, body = api.request("POST", "/v1/sandboxes", {"image": "s:1", "ttl_s": 1})
    assert status == 201, body
    sid = json.loads(body)["id"]
    assert len(etcd.keys("/warren/expiry/")) == 1
    deadline = time.time() + 15
    while time.time() < deadline and etcd.keys("/warren/sandboxes/"):
        time.sleep(0.2)
    assert etcd.keys("/warren/sandboxes/") == [], "the TTL did not end " + sid
    assert etcd.keys("/warren/expiry/") == []
    assert etcd.get("/warren/leaders/expiry") is not None

    # Stopped, the simulated nodes leave the cluster at once.
    nodes.send_signal(signal.SIGTERM)
    assert nodes.wait(timeout=30) == 0
    assert [k for k in etcd.keys("/warren/node/") if k.endswith("/record")] == []


def test_the_cluster_bench_runs_end_to_end_at_a_small_size():
    r = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cluster.py"), "--parts", "api", "--nodes", "4",
         "--seconds", "1", "--clients", "1,2", "--api-clients", "4", "--batch", "200",
         "--live", "600"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 1 ") or
            line.startswith("| 2 ")]
    assert len(rows) == 2, r.stdout
    for row in rows:
        creates_per_s = float(row.split("|")[2])
        assert creates_per_s > 0, row
    assert "One job's batch, one call to one replica: 200 of 200 made" in r.stdout, r.stdout
    filled = re.search(r"Filled to ([\d,]+) live sandboxes", r.stdout)
    assert filled and int(filled.group(1).replace(",", "")) >= 600, r.stdout
