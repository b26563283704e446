"""/metrics parses with a real Prometheus text parser and carries what the contract lists, and
every API answer names its request id (the daemon's log line carries the same id)."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from conftest import _target


def _families(server):
    r = server.http("GET", "/metrics")
    assert r.status == 200 and r.headers.get("Content-Type", "").startswith("text/plain"), r
    return {f.name: f for f in text_string_to_metric_families(r.body.decode())}


def test_metrics_parse_and_cover_the_contract(server, image, sandboxes):
    sid = server.http("POST", "/v1/sandboxes", {"image": image}).json["id"]
    sandboxes.append(sid)
    assert server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}).status == 200
    server.http("GET", "/v1/sandboxes/sb-doesnotexist00")   # one not_found error
    fams = _families(server)
    # One machine's node is the server itself; a cluster's nodes are told apart by a label and
    # report what placement reserved on them (their uid blocks are their own business).
    per_node = ("warren_node_uid_slots",) if _target() == "serve" else \
        ("warren_node_reserved_cpus",)
    for name in ("warren_sandboxes", "warren_create_seconds", "warren_exec_seconds",
                 "warren_api_errors", "warren_egress_bytes", "warren_node_sandboxes",
                 "warren_node_memory_bytes", "warren_node_cpus") + per_node:
        assert name in fams, (name, sorted(fams))
    if _target() == "cluster":
        assert all("node" in s.labels for s in fams["warren_node_sandboxes"].samples)
    assert fams["warren_create_seconds"].type == "histogram"
    assert fams["warren_exec_seconds"].type == "histogram"
    running = [s for s in fams["warren_sandboxes"].samples
               if s.labels == {"backend": "container", "state": "running"}]
    assert running and running[0].value >= 1
    counts = {s.name: s.value for s in fams["warren_create_seconds"].samples if s.name.endswith("_count")}
    assert counts.get("warren_create_seconds_count", 0) >= 1
    errs = {s.labels.get("code"): s.value for s in fams["warren_api_errors"].samples}
    assert errs.get("not_found", 0) >= 1, errs
    mem = {}
    for s in fams["warren_node_memory_bytes"].samples:  # summed over a cluster's nodes
        mem[s.labels["kind"]] = mem.get(s.labels["kind"], 0) + s.value
    assert mem["total"] > mem["available"] > 0
    sources = {s.labels["source"] for s in fams["warren_egress_bytes"].samples}
    assert sources == {"upstream", "cache"}


def test_every_answer_has_a_request_id_that_the_log_shows(server):
    r = server.http("GET", "/v1/sandboxes/sb-0000000000000000")
    rid = r.headers.get("X-Request-Id")
    assert rid and re.fullmatch(r"[0-9a-f]{12}", rid), r.headers
    assert server.http("GET", "/v1/nodes").headers.get("X-Request-Id") != rid
    import time
    for _ in range(50):
        if f"req={rid} " in server.log_tail(400):
            break
        time.sleep(0.1)
    line = next(l for l in server.log_tail(400).splitlines() if f"req={rid} " in l)
    assert "method=GET" in line and "status=404" in line and "path=/v1/sandboxes/" in line


def test_series_exist_before_use_and_every_exec_is_timed(server, image, sandboxes):
    fams = _families(server)
    labels = {(s.labels["backend"], s.labels["state"]) for s in fams["warren_sandboxes"].samples}
    assert {("container", "running"), ("fncall", "running"), ("microvm", "paused")} <= labels, labels
    codes = {s.labels["code"] for s in fams["warren_api_errors"].samples}
    assert codes >= {"not_found", "invalid", "conflict", "quota", "unauthorized", "forbidden", "unavailable",
                     "internal"}, codes

    def exec_count():
        return next(s.value for s in _families(server)["warren_exec_seconds"].samples
                    if s.name == "warren_exec_seconds_count")
    sid = server.http("POST", "/v1/sandboxes", {"image": image}).json["id"]
    sandboxes.append(sid)
    before = exec_count()
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"], "wait": False})
    assert r.status == 202, r
    eid = r.json["exec_id"]
    for _ in range(100):
        if server.http("GET", f"/v1/sandboxes/{sid}/execs/{eid}").json["state"] == "exited":
            break
        import time
        time.sleep(0.05)
    assert exec_count() == before + 1  # an exec nobody waited on counts too
