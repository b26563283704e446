"""A batch of 1,000 sandboxes in one call succeeds, and deleting them leaves nothing behind."""

from __future__ import annotations

import concurrent.futures as cf

import pytest

import e2e_util


@pytest.mark.serve_only("reads one node's uid slots from /v1/nodes")
def test_batch_of_1000_and_clean_up(server, image):
    before = e2e_util.node_usage(server)
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
    assert e2e_util.node_usage(server) == before
    assert server.http("GET", "/v1/sandboxes?label=batch=k").json["sandboxes"] == []
