"""A cluster over a 3-member etcd: with one member stopped, service goes on; with quorum
gone, the API answers 503 with a clear message while the sandboxes keep running, and when etcd
returns everything works again with nothing half-written."""
import json
import tempfile
import time

import pytest

import cluster_util
import e2e_util
from conftest import _scratch_base, _warren_bin, safe_rmtree


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = tmp_path_factory.mktemp("etcd3-logs")
    scratch = _scratch_base()
    etcd = cluster_util.EtcdCluster(scratch, str(logs), 3)
    shared = tempfile.mkdtemp(prefix="warren-e2e-layers-", dir=scratch)
    dirs = [shared]
    node = api = None
    try:
        data_dir = tempfile.mkdtemp(prefix="warren-e2e-e1-", dir=scratch)
        dirs.append(data_dir)
        node = cluster_util.Node(str(_warren_bin()), etcd, "e1", data_dir, str(logs / "e1.log"),
                                 ["--layer-store", shared, "--no-network", "--no-microvm",
                                  "--warm-pool", "0", "--ttl", "5"])
        node.start()
        api_dir = tempfile.mkdtemp(prefix="warren-e2e-api-", dir=scratch)
        home = tempfile.mkdtemp(prefix="warren-e2e-home-", dir=scratch)
        dirs += [api_dir, home]
        api = cluster_util.ApiServer(str(_warren_bin()), etcd, api_dir, shared,
                                     str(logs / "apiserver.log"), home)
        api.start()
        cluster_util.build_test_image(api)
        yield {"etcd": etcd, "node": node, "api": api}
    finally:
        if api:
            api.stop()
        if node:
            node.stop()
        etcd.close()
        for d in dirs:
            safe_rmtree(d)


@pytest.fixture(autouse=True)
def etcd_logs_on_failure(cluster):
    """Each member's last log lines, printed at teardown: pytest shows them when a test fails."""
    yield
    for i in range(cluster["etcd"].n):
        print(f"--- etcd member {i} ---\n{cluster['etcd'].log_tail(i)}")


def _exec(api, sid, *argv):
    return api.cli("exec", sid, "--", *argv)


def test_one_member_stopped_service_goes_on(cluster):
    etcd, api = cluster["etcd"], cluster["api"]
    status, body = api.request("POST", "/v1/sandboxes", {"image": "c:1"})
    assert status == 201, body
    first = json.loads(body)["id"]
    etcd.stop(0)  # the member the roles name first
    try:
        status, body = api.request("POST", "/v1/sandboxes", {"image": "c:1"})
        assert status == 201, body
        second = json.loads(body)["id"]
        for sid in (first, second):
            r = _exec(api, sid, "echo", "ok")
            assert (r.returncode, r.stdout) == (0, "ok\n"), r.stderr
        status, body = api.request("DELETE", f"/v1/sandboxes/{second}")
        assert status == 204, body
        status, body = api.request("GET", "/v1/sandboxes")
        assert [s["id"] for s in json.loads(body)["sandboxes"]] == [first]
    finally:
        etcd.start(0)
    status, body = api.request("DELETE", f"/v1/sandboxes/{first}")
    assert status == 204, body


def test_etcd_unreachable_is_503_and_sandboxes_keep_running(cluster):
    etcd, api, node = cluster["etcd"], cluster["api"], cluster["node"]
    status, body = api.request("POST", "/v1/sandboxes", {"image": "c:1"})
    assert status == 201, body
    sid = json.loads(body)["id"]
    # A command that runs through the outage, writing a line every 0.2 s.
    status, body = api.request("POST", f"/v1/sandboxes/{sid}/exec",
                               {"argv": ["sh", "-c", "while :; do date >> /tmp/tick; sleep 0.2; "
                                                     "done"], "wait": False})
    assert status == 202, body
    etcd.stop(1)
    etcd.stop(2)  # quorum lost: no member can answer
    try:
        for method, path, req in (("GET", "/v1/sandboxes", None),
                                  ("POST", "/v1/sandboxes", {"image": "c:1"}),
                                  ("GET", f"/v1/sandboxes/{sid}", None)):
            resp = e2e_util.http_request(api, method, path, req, timeout=60)
            err = e2e_util.assert_error(resp, 503, "unavailable")
            assert "etcd" in err["message"] or "cluster store" in err["message"], err
        time.sleep(2)
    finally:
        etcd.start(1)
        etcd.start(2)
    assert e2e_util.wait_until(
        lambda: api.request("GET", f"/v1/sandboxes/{sid}")[0] == 200, timeout=30)
    # It ran all along: its ticks cover the outage.
    r = _exec(api, sid, "sh", "-c", "wc -l < /tmp/tick")
    assert r.returncode == 0 and int(r.stdout) >= 10, (r.stdout, r.stderr)
    # Nothing half-written: no create left `creating`, no orphan claim; only our sandbox.
    status, body = api.request("GET", "/v1/sandboxes")
    listed = json.loads(body)["sandboxes"]
    assert [(s["id"], s["state"]) for s in listed] == [(sid, "running")], listed
    assert etcd.keys("/warren/creating/") == []
    status, body = api.request("DELETE", f"/v1/sandboxes/{sid}")
    assert status == 204, body
    assert e2e_util.wait_until(lambda: (node.record() or {}).get("sandboxes") == 0, timeout=15)
    alloc = json.loads(etcd.get("/warren/node/e1/alloc") or "{}")
    assert alloc.get("sandboxes", 0) == 0, alloc
