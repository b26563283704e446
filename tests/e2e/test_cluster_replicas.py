"""Two `warren apiserver` replicas over one etcd and two `warren node`s, as behind a load
balancer: a tenant's quota holds across replicas, a stream read through one replica resumes on
the other, nodes are cordoned and drained through the CLI, an API server killed during a create
burst leaves nothing half-made (the other cleans up), and a node that comes back after being
taken for gone runs its sandboxes again."""
import http.client
import json
import signal
import tempfile
import threading
import time

import pytest

import cluster_util
import e2e_util
from conftest import _scratch_base, _warren_bin, safe_rmtree

NODE_FLAGS = ["--no-network", "--no-microvm", "--warm-pool", "0", "--ttl", "3"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = tmp_path_factory.mktemp("replicas-logs")
    scratch = _scratch_base()
    etcd = cluster_util.Etcd(scratch, str(logs / "etcd.log"))
    shared = tempfile.mkdtemp(prefix="warren-e2e-layers-", dir=scratch)
    nodes, apis, dirs = [], [], []
    try:
        for name in ("r1", "r2"):
            data_dir = tempfile.mkdtemp(prefix=f"warren-e2e-{name}-", dir=scratch)
            dirs.append(data_dir)
            n = cluster_util.Node(str(_warren_bin()), etcd, name, data_dir,
                                  str(logs / f"{name}.log"), ["--layer-store", shared] + NODE_FLAGS)
            n.start()
            nodes.append(n)
        for i in range(2):
            api_dir = tempfile.mkdtemp(prefix="warren-e2e-api-", dir=scratch)
            home = tempfile.mkdtemp(prefix="warren-e2e-home-", dir=scratch)
            dirs += [api_dir, home]
            a = cluster_util.ApiServer(str(_warren_bin()), etcd, api_dir, shared,
                                       str(logs / f"apiserver{i}.log"), home)
            a.start()
            apis.append(a)
        cluster_util.build_test_image(apis[0])
        yield {"etcd": etcd, "nodes": nodes, "apis": apis, "shared": shared, "scratch": scratch,
               "logs": logs}
    finally:
        for a in apis:
            a.stop()
        for n in nodes:
            n.stop()
        etcd.stop()
        for d in dirs + [shared]:
            safe_rmtree(d)


# A tenth of a core each: the nodes (this machine's cores each) take many.
SMALL = {"image": "c:1", "cpu": 0.1, "memory_mb": 64}


def _create(api, token=None, body=None):
    r = e2e_util.http_request(api, "POST", "/v1/sandboxes", body or SMALL,
                              token=token, timeout=120)
    return r


def _delete_all(api):
    status, body = api.request("GET", "/v1/sandboxes")
    for sb in json.loads(body)["sandboxes"]:
        st, b = api.request("DELETE", f"/v1/sandboxes/{sb['id']}")
        assert st in (204, 404), b


def _assert_consistent(etcd, nodes):
    """Every record is settled, each node runs exactly the sandboxes recorded on it, and each
    node's reservation counts exactly those."""
    records = [json.loads(etcd.get(k)) for k in etcd.keys("/warren/sandboxes/")]
    assert not [r for r in records if r["state"] == "creating"], records
    assert etcd.keys("/warren/creating/") == []
    for n in nodes:
        mine = [r for r in records if r["node"] == n.name and r["state"] != "lost"]
        assert e2e_util.wait_until(lambda: (n.record() or {}).get("sandboxes") == len(mine),
                                   timeout=10), (n.name, n.record(), mine)
        alloc = json.loads(etcd.get(f"/warren/node/{n.name}/alloc") or "{}")
        assert alloc.get("sandboxes", 0) == len(mine), (n.name, alloc, mine)


def test_a_quota_holds_across_replicas(cluster):
    a, b = cluster["apis"]
    name = e2e_util.unique("q")
    status, body = a.request("POST", "/v1/tokens", {"name": name, "max_sandboxes": 3,
                                                     "scopes": ["sandbox:*", "exec"]})
    assert status == 201, body
    token = json.loads(body)["token"]
    results = []
    lock = threading.Lock()

    def one(api):
        r = _create(api, token)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one, args=(a if i % 2 else b,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = [r for r in results if r.status == 201]
    refused = [r for r in results if r.status != 201]
    assert len(made) == 3, results
    for r in refused:
        e2e_util.assert_error(r, 429, "quota")
    # Both replicas report the same use.
    for api in (a, b):
        status, body = api.request("GET", "/v1/tokens")
        tok = next(t for t in json.loads(body)["tokens"] if t["name"] == name)
        assert tok["usage"]["sandboxes"] == 3, tok
    # A slot freed through one replica is granted through the other, once.
    first = made[0].json["id"]
    r = e2e_util.http_request(a, "DELETE", f"/v1/sandboxes/{first}", token=token)
    assert r.status == 204, r
    assert _create(b, token).status == 201
    e2e_util.assert_error(_create(a, token), 429, "quota")
    _delete_all(a)
    status, body = b.request("GET", "/v1/tokens")
    tok = next(t for t in json.loads(body)["tokens"] if t["name"] == name)
    assert tok["usage"]["sandboxes"] == 0, tok
    a.request("DELETE", f"/v1/tokens/{name}")
    _assert_consistent(cluster["etcd"], cluster["nodes"])


def test_a_stream_resumes_on_the_other_replica(cluster):
    a, b = cluster["apis"]
    r = _create(a)
    assert r.status == 201, r
    sid = r.json["id"]
    status, body = a.request("POST", f"/v1/sandboxes/{sid}/exec",
                             {"argv": ["sh", "-c", "for i in $(seq 1 20); do echo line$i; "
                                                   "sleep 0.05; done"], "wait": False})
    assert status == 202, body
    exec_id = json.loads(body)["exec_id"]
    # Read the first lines live through replica a, then drop the connection.
    conn = http.client.HTTPConnection(a.host, a.port, timeout=30)
    conn.request("GET", f"/v1/sandboxes/{sid}/execs/{exec_id}/stream?after=0",
                 headers={"Authorization": "Bearer " + a.token})
    resp = conn.getresponse()
    got = [json.loads(resp.readline())]
    conn.close()
    # The rest through replica b, from the last sequence number seen.
    status, body = b.request("GET",
                             f"/v1/sandboxes/{sid}/execs/{exec_id}/stream?after={got[-1]['seq']}")
    assert status == 200, body
    got += e2e_util.ndjson_lines(body)
    out = "".join(l.get("data", "") for l in got if "result" not in l)
    assert out == "".join(f"line{i}\n" for i in range(1, 21)), out
    assert got[-1]["result"]["exit_code"] == 0
    seqs = [l["seq"] for l in got if "seq" in l]
    assert seqs == sorted(set(seqs)), seqs  # nothing twice
    _delete_all(a)


def test_cordon_and_drain_through_the_cli(cluster):
    a, _ = cluster["apis"]
    etcd, nodes = cluster["etcd"], cluster["nodes"]
    before = [_create(a) for _ in range(2)]
    assert all(r.status == 201 for r in before), before
    on = {r.json["node"] for r in before}
    assert on == {"r1", "r2"}, on
    try:
        r = a.cli("node", "cordon", "r1")
        assert r.returncode == 0, r.stderr
        assert "cordoned" in r.stdout
        status, body = a.request("GET", "/v1/nodes")
        states = {n["name"]: n["state"] for n in json.loads(body)["nodes"]}
        assert states == {"r1": "cordoned", "r2": "ready"}, states
        placed = [_create(a) for _ in range(3)]
        assert all(p.status == 201 and p.json["node"] == "r2" for p in placed), placed
        # Draining r2 deletes its sandboxes; r1's is untouched (cordon deleted nothing).
        r = a.cli("node", "drain", "r2")
        assert r.returncode == 0, r.stderr
        assert "4 sandbox(es) deleted" in r.stdout, r.stdout
        status, body = a.request("GET", "/v1/sandboxes")
        left = json.loads(body)["sandboxes"]
        assert [(s["node"], s["state"]) for s in left] == [("r1", "running")], left
        # Nothing can be placed now: no node takes sandboxes.
        e2e_util.assert_error(_create(a), 503, "unavailable")
    finally:
        for name in ("r1", "r2"):
            r = a.cli("node", "uncordon", name)
            assert r.returncode == 0, r.stderr
    assert _create(a).status == 201
    r = a.cli("node", "cordon", "no-such-node")
    assert r.returncode != 0 and "no-such-node" in r.stderr
    _delete_all(a)
    _assert_consistent(etcd, nodes)


def test_an_api_server_killed_during_a_create_burst_leaves_nothing_half_made(cluster):
    a, _ = cluster["apis"]
    etcd, nodes = cluster["etcd"], cluster["nodes"]
    scratch, logs = cluster["scratch"], cluster["logs"]
    api_dir = tempfile.mkdtemp(prefix="warren-e2e-api-", dir=scratch)
    home = tempfile.mkdtemp(prefix="warren-e2e-home-", dir=scratch)
    doomed = cluster_util.ApiServer(str(_warren_bin()), etcd, api_dir, cluster["shared"],
                                    str(logs / "apiserver-killed.log"), home)
    doomed.start()
    try:
        outcomes = []

        def one():
            try:
                outcomes.append(_create(doomed).status)
            except OSError as e:  # the connection died with the server
                outcomes.append(repr(e))

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        # Kill it while creates are under way (some recorded `creating`, some on a node).
        assert e2e_util.wait_until(lambda: etcd.keys("/warren/creating/") != [], timeout=20,
                                   interval=0.01)
        doomed.stop(signal.SIGKILL)
        for t in threads:
            t.join()
        # The surviving replica cleans up once the dead one's lease (5 s) is gone.
        assert e2e_util.wait_until(lambda: etcd.keys("/warren/creating/") == [], timeout=30), \
            etcd.keys("/warren/creating/")
        _assert_consistent(etcd, nodes)
        # Every create answered 201 made a sandbox that runs; the rest left nothing.
        status, body = a.request("GET", "/v1/sandboxes")
        assert all(s["state"] == "running" for s in json.loads(body)["sandboxes"])
        assert len(json.loads(body)["sandboxes"]) >= outcomes.count(201)
    finally:
        doomed.stop()
        safe_rmtree(api_dir)
        safe_rmtree(home)
    _delete_all(a)
    _assert_consistent(etcd, nodes)


def test_idle_timeouts_hold_across_replicas_and_outlive_their_maker(cluster):
    """A sandbox made at one replica and used only at another is not idle; the death of the
    replica that made it does not stop its idle timeout; one nobody uses ends within its
    timeout, the slack (1 s here) and a sweep, once a live replica leads the sweeping."""
    a, b = cluster["apis"]
    etcd, nodes = cluster["etcd"], cluster["nodes"]
    api_dir = tempfile.mkdtemp(prefix="warren-e2e-api-", dir=cluster["scratch"])
    home = tempfile.mkdtemp(prefix="warren-e2e-home-", dir=cluster["scratch"])
    maker = cluster_util.ApiServer(str(_warren_bin()), etcd, api_dir, cluster["shared"],
                                   str(cluster["logs"] / "apiserver-maker.log"), home)
    maker.start()
    # Checked in etcd: a GET through an API server would be a use itself.
    alive = lambda sid: etcd.get(f"/warren/sandboxes/{sid}") is not None
    try:
        used, unused = (_create(maker, body={**SMALL, "idle_timeout_s": 4}).json["id"]
                        for _ in range(2))
        maker.stop(signal.SIGKILL)
        t0 = time.time()
        while time.time() - t0 < 12:  # three timeouts, and the sweeping moves to a or b
            st, body = b.request("GET", f"/v1/sandboxes/{used}")
            assert st == 200, body
            time.sleep(1)
        t_last = time.time()
        assert alive(used)
        assert e2e_util.wait_until(lambda: not alive(unused), timeout=15)
        assert e2e_util.wait_until(lambda: not alive(used), timeout=20)
        assert time.time() - t_last >= 3  # not before its timeout (give or take a second)
    finally:
        maker.stop()
        safe_rmtree(api_dir)
        safe_rmtree(home)
    assert e2e_util.wait_until(lambda: etcd.keys("/warren/idle-at/") == [], timeout=10)
    _delete_all(a)
    _assert_consistent(etcd, nodes)


def test_a_node_that_comes_back_runs_its_sandboxes_again(cluster):
    a, b = cluster["apis"]
    etcd, nodes = cluster["etcd"], cluster["nodes"]
    made = [_create(a).json for _ in range(4)]
    node = nodes[0]
    mine = [s["id"] for s in made if s["node"] == node.name]
    assert len(mine) == 2, made
    r = a.cli("exec", mine[0], "--", "sh", "-c", "echo before > /tmp/mark")
    assert r.returncode == 0, r.stderr
    node.stop(signal.SIGKILL)  # its sandboxes keep running, its lease runs out

    def state(sid):
        st, body = b.request("GET", f"/v1/sandboxes/{sid}")
        return json.loads(body).get("state")

    assert e2e_util.wait_until(lambda: all(state(s) == "lost" for s in mine), timeout=20)
    # One is deleted while its node is away: the node must not keep it when it returns.
    status, body = b.request("DELETE", f"/v1/sandboxes/{mine[1]}")
    assert status == 204, body
    node.start()
    assert e2e_util.wait_until(lambda: state(mine[0]) == "running", timeout=20), state(mine[0])
    status, body = a.request("GET", f"/v1/sandboxes/{mine[0]}")
    assert "reason" not in json.loads(body)
    r = b.cli("exec", mine[0], "--", "cat", "/tmp/mark")
    assert (r.returncode, r.stdout) == (0, "before\n"), r.stderr
    assert e2e_util.wait_until(lambda: (node.record() or {}).get("sandboxes") == 1, timeout=10), \
        node.record()
    _assert_consistent(etcd, nodes)
    _delete_all(a)
    _assert_consistent(etcd, nodes)
