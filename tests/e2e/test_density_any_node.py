"""A sandbox's `density` as its node reports it, on every target: in-process on `warren serve`,
over the node wire (GET /node/v1/sandboxes/{id}/density) on a cluster."""

from __future__ import annotations


def test_a_running_sandbox_reports_how_its_node_holds_it(server, image, sandboxes):
    r = server.http("POST", "/v1/sandboxes", {"image": image, "memory_mb": 128})
    assert r.status == 201, r
    sid = r.json["id"]
    sandboxes.append(sid)
    x = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
    assert x.status == 200 and x.json["exit_code"] == 0, x
    got = server.http("GET", f"/v1/sandboxes/{sid}")
    assert got.status == 200, got
    d = got.json.get("density")
    assert d is not None, f"no density in {got.json}"
    assert d["activity"] in ("active", "idle", "hibernated"), d
    assert d["limit_bytes"] >= 128 << 20 and d["resident_bytes"] > 0, d
    assert d["wakes"] == 0 and d["user_paused"] is False, d
    # A paused sandbox still reports it, as the user's pause.
    assert server.http("POST", f"/v1/sandboxes/{sid}/pause").status in (200, 204)
    paused = server.http("GET", f"/v1/sandboxes/{sid}").json
    assert paused["state"] == "paused" and paused["density"]["user_paused"] is True, paused
    assert server.http("POST", f"/v1/sandboxes/{sid}/resume").status in (200, 204)
