"""A batch of 1,000 sandboxes in one call succeeds, and deleting them leaves nothing behind."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
import time

import pytest

ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu")


def _usage(server) -> tuple[int, int, int]:
    """(sandboxes, uid slots, cgroup dirs) in use, not counting the node's warm pool (ready
    sandboxes it keeps for creates, each with a uid slot and a cgroup per hierarchy). Waits
    until the pool is not making one, so the three readings agree."""
    parent = "warren-" + hashlib.sha256(os.path.realpath(server.data_dir).encode()).hexdigest()[:8]
    roots = [os.path.join(r, parent) for r in ROOTS if os.path.isdir(os.path.join(r, parent))]
    last = None
    for _ in range(600):
        node = server.http("GET", "/v1/nodes").json["nodes"][0]
        warm = node.get("warm_pool", {})
        dirs = sum(1 for r in roots for e in os.listdir(r) if e.startswith(("sb-", "warm-")))
        again = server.http("GET", "/v1/nodes").json["nodes"][0]
        if warm.get("making", 0) == 0 and again.get("warm_pool", {}) == warm and \
                again["uid_slots_used"] == node["uid_slots_used"]:
            ready = warm.get("ready", 0)
            now = (node["sandboxes"], node["uid_slots_used"] - ready, dirs - ready * len(roots))
            if now == last:
                return now
            last = now
        time.sleep(0.1)
    raise AssertionError(f"the node's warm pool never settled: {last}")


@pytest.mark.serve_only("reads one node's uid slots from /v1/nodes")
def test_batch_of_1000_and_clean_up(server, image):
    before = _usage(server)
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
        assert node["sandboxes"] == before[0] + 1000
    finally:
        with cf.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda sid: server.http("DELETE", "/v1/sandboxes/" + sid, timeout=120).status, ids))
    assert set(codes) <= {204}, set(codes)
    assert _usage(server) == before
    assert server.http("GET", "/v1/sandboxes?label=batch=k").json["sandboxes"] == []
