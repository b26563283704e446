"""A batch of 1,000 sandboxes in one call succeeds, and deleting them leaves nothing behind."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os


def _cgroup_children(server) -> int:
    parent = "warren-" + hashlib.sha256(os.path.realpath(server.data_dir).encode()).hexdigest()[:8]
    n = 0
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu"):
        p = os.path.join(root, parent)
        if os.path.isdir(p):
            n += sum(1 for e in os.listdir(p) if e.startswith("sb-"))
    return n


def test_batch_of_1000_and_clean_up(server, image):
    node0 = server.http("GET", "/v1/nodes").json["nodes"][0]
    cg0 = _cgroup_children(server)
    r = server.http("POST", "/v1/sandboxes:batch",
                    {"count": 1000, "spec": {"image": image, "memory_mb": 64, "labels": {"batch": "k"}}},
                    timeout=900)
    assert r.status == 200, r
    ids = [s["id"] for s in r.json["sandboxes"]]
    try:
        assert r.json["errors"] == [] and len(ids) == 1000 and len(set(ids)) == 1000
        assert all(s["state"] == "running" for s in r.json["sandboxes"])
        listed = server.http("GET", "/v1/sandboxes?label=batch=k").json["sandboxes"]
        assert len(listed) == 1000
        # A sample of them works.
        for sid in ids[::250]:
            x = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["hostname"]})
            assert x.status == 200 and x.json["stdout"] == sid + "\n", x
        node = server.http("GET", "/v1/nodes").json["nodes"][0]
        assert node["sandboxes"] == node0["sandboxes"] + 1000
    finally:
        with cf.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda sid: server.http("DELETE", "/v1/sandboxes/" + sid, timeout=120).status, ids))
    assert set(codes) <= {204}, set(codes)
    node = server.http("GET", "/v1/nodes").json["nodes"][0]
    assert node["sandboxes"] == node0["sandboxes"]
    assert node["uid_slots_used"] == node0["uid_slots_used"]
    assert _cgroup_children(server) == cg0
    assert server.http("GET", "/v1/sandboxes?label=batch=k").json["sandboxes"] == []
