"""Tokens, scopes, ownership and quotas: a principal sees only its own sandboxes, a scope
allows only what it names, a quota refuses with 429/quota and frees up on delete."""

from __future__ import annotations

import os
import sqlite3
import time

import pytest

import e2e_util as u


def as_(server, secret, method, path, body=None):
    return server.http(method, path, body, headers={"Authorization": "Bearer " + secret})


def _cleanup(server, ids):
    for sid in ids:
        server.http("DELETE", "/v1/sandboxes/" + sid, timeout=60)


def test_principals_cannot_see_or_touch_each_others_sandboxes(server, image, tokens):
    _, a = tokens()
    _, b = tokens()
    r = as_(server, a, "POST", "/v1/sandboxes", {"image": image, "labels": {"who": "a"}})
    assert r.status == 201, r
    sid = r.json["id"]
    try:
        assert r.json["owner"] != "admin"
        # b: every way in answers as if the sandbox did not exist.
        for method, path, body in [
            ("GET", f"/v1/sandboxes/{sid}", None),
            ("DELETE", f"/v1/sandboxes/{sid}", None),
            ("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}),
            ("POST", f"/v1/sandboxes/{sid}/pause", None),
            ("GET", f"/v1/sandboxes/{sid}/files?path=/etc/marker", None),
            ("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/x", b"x"),
        ]:
            u.assert_error(as_(server, b, method, path, body), 404, "not_found")
        assert sid not in [s["id"] for s in as_(server, b, "GET", "/v1/sandboxes").json["sandboxes"]]
        # a sees and uses it; the admin sees it too.
        assert sid in [s["id"] for s in as_(server, a, "GET", "/v1/sandboxes").json["sandboxes"]]
        r = as_(server, a, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["cat", "/etc/marker"]})
        assert r.status == 200 and r.json["stdout"] == "warren-e2e-rootfs\n", r
        assert server.http("GET", f"/v1/sandboxes/{sid}").status == 200
        # An exec id of a's cannot be read through b either.
        eid = r.json["exec_id"]
        u.assert_error(as_(server, b, "GET", f"/v1/sandboxes/{sid}/execs/{eid}"), 404, "not_found")
    finally:
        _cleanup(server, [sid])


@pytest.mark.parametrize("scopes,method,path,body", [
    (["sandbox:read"], "POST", "/v1/sandboxes", {"image": "t:1"}),
    (["sandbox:*"], "POST", "/v1/layers?name=x&tag=1", b"x"),
    (["image:read"], "DELETE", "/v1/layers/t:1", None),
    (["sandbox:*", "exec"], "POST", "/v1/tokens", {"name": "nope"}),
    (["sandbox:*", "exec", "image:*"], "GET", "/v1/tokens", None),
    (["image:read"], "GET", "/v1/sandboxes", None),
])
def test_scopes_limit_what_a_token_may_do(server, image, tokens, scopes, method, path, body):
    _, t = tokens(scopes=scopes)
    u.assert_error(as_(server, t, method, path, body), 403, "forbidden")


def test_exec_scope_is_needed_to_run_commands(server, image, tokens):
    _, t = tokens(scopes=["sandbox:*"])
    r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
    assert r.status == 201, r
    try:
        u.assert_error(as_(server, t, "POST", f"/v1/sandboxes/{r.json['id']}/exec", {"argv": ["true"]}),
                       403, "forbidden")
    finally:
        _cleanup(server, [r.json["id"]])


def test_quota_of_three_refuses_the_fourth_and_frees_on_delete(server, image, tokens):
    _, t = tokens(max_sandboxes=3)
    ids = []
    try:
        for _ in range(3):
            r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
            assert r.status == 201, r
            ids.append(r.json["id"])
        err = u.assert_error(as_(server, t, "POST", "/v1/sandboxes", {"image": image}), 429, "quota")
        assert "3" in err["message"]
        # Another principal is not affected by this one's quota.
        r = server.http("POST", "/v1/sandboxes", {"image": image})
        assert r.status == 201
        ids.append(r.json["id"])
        assert as_(server, t, "DELETE", f"/v1/sandboxes/{ids.pop(0)}").status == 204
        r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
        assert r.status == 201, r
        ids.append(r.json["id"])
    finally:
        _cleanup(server, ids)


def test_batch_beyond_quota_reports_per_item(server, image, tokens):
    _, t = tokens(max_sandboxes=2)
    r = as_(server, t, "POST", "/v1/sandboxes:batch", {"count": 4, "spec": {"image": image}})
    try:
        assert r.status == 200, r
        assert len(r.json["sandboxes"]) == 2
        assert [e["error"]["code"] for e in r.json["errors"]] == ["quota", "quota"]
        assert [e["index"] for e in r.json["errors"]] == [2, 3]
    finally:
        _cleanup(server, [s["id"] for s in r.json.get("sandboxes", [])])


def test_cpu_and_memory_quotas(server, image, tokens):
    _, t = tokens(max_cpu=1.5, max_memory_mb=384)
    ids = []
    try:
        r = as_(server, t, "POST", "/v1/sandboxes", {"image": image, "cpu": 1, "memory_mb": 256})
        assert r.status == 201, r
        ids.append(r.json["id"])
        err = u.assert_error(as_(server, t, "POST", "/v1/sandboxes", {"image": image, "cpu": 1, "memory_mb": 64}),
                             429, "quota")
        assert "CPU" in err["message"]
        err = u.assert_error(as_(server, t, "POST", "/v1/sandboxes", {"image": image, "cpu": 0.5, "memory_mb": 256}),
                             429, "quota")
        assert "memory" in err["message"]
        r = as_(server, t, "POST", "/v1/sandboxes", {"image": image, "cpu": 0.5, "memory_mb": 128})
        assert r.status == 201, r
        ids.append(r.json["id"])
    finally:
        _cleanup(server, ids)


def test_create_rate_limit(server, image, tokens):
    _, t = tokens(create_rate=1)
    ids = []
    try:
        r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
        assert r.status == 201, r
        ids.append(r.json["id"])
        err = u.assert_error(as_(server, t, "POST", "/v1/sandboxes", {"image": image}), 429, "quota")
        assert "rate" in err["message"]
        time.sleep(1.1)
        r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
        assert r.status == 201, r
        ids.append(r.json["id"])
    finally:
        _cleanup(server, ids)


def test_failed_create_does_not_use_up_quota(server, image, tokens):
    _, t = tokens(max_sandboxes=1)
    for _ in range(3):
        u.assert_error(as_(server, t, "POST", "/v1/sandboxes", {"image": "no-such:image"}), 400, "invalid")
    r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
    assert r.status == 201, r
    _cleanup(server, [r.json["id"]])


def test_revoked_token_stops_working_and_sandboxes_stay(server, image, tokens):
    name, t = tokens()
    r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
    assert r.status == 201
    sid = r.json["id"]
    try:
        assert server.http("DELETE", "/v1/tokens/" + name).status == 204
        u.assert_error(as_(server, t, "GET", "/v1/sandboxes"), 401, "unauthorized")
        assert server.http("GET", f"/v1/sandboxes/{sid}").json["state"] == "running"
    finally:
        _cleanup(server, [sid])


@pytest.mark.serve_only("reads warren serve's SQLite")
def test_tokens_are_stored_hashed_and_listed_without_secrets(server, tokens):
    name, t = tokens(scopes=["sandbox:read"])
    listed = {x["name"]: x for x in server.http("GET", "/v1/tokens").json["tokens"]}
    assert listed[name]["scopes"] == ["sandbox:read"]
    assert "token" not in listed[name] and t not in str(listed)
    db = os.path.join(server.data_dir, "state.db")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        dump = "\n".join(con.iterdump())
    finally:
        con.close()
    for suffix in ("-wal", ""):
        p = db + suffix
        if os.path.exists(p):
            with open(p, "rb") as f:
                assert t.encode() not in f.read(), f"the secret is stored in {p}"
    assert t not in dump


@pytest.mark.parametrize("body,why", [
    ({"name": "admin"}, "name"), ({"name": "a b"}, "name"), ({"name": "x", "scopes": ["root"]}, "unknown scope"),
    ({"name": "x", "max_sandboxes": -1}, "max_sandboxes"), ({"name": "x", "bogus": 1}, "bogus"),
])
def test_bad_token_requests(server, body, why):
    err = u.assert_error(server.http("POST", "/v1/tokens", body), 400, "invalid")
    assert why in err["message"]


def test_duplicate_token_name_conflicts(server, tokens):
    name, _ = tokens()
    u.assert_error(server.http("POST", "/v1/tokens", {"name": name}), 409, "conflict")


def test_cli_token_create_ls_rm(server, image):
    name = u.unique("clitok")
    r = server.cli("token", "create", name, "--scopes", "sandbox:*,exec", "--max-sandboxes", "2",
                   "--max-memory", "1G")
    assert r.returncode == 0, r.stderr
    secret = r.stdout.strip()
    assert secret.startswith("wt_") and "shown only this once" in r.stderr
    try:
        ls = server.cli("token", "ls")
        assert ls.returncode == 0
        line = next(l for l in ls.stdout.splitlines() if l.startswith(name + " "))
        assert "sandbox:*,exec" in line and "0/2" in line and "1024" in line
        assert secret not in ls.stdout
        # The new token works with the CLI, and its quota shows in its usage.
        r = server.cli("run", "--image", image, "--", "echo", "ok", env={"WARREN_TOKEN": secret})
        assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
        r = server.cli("token", "ls", env={"WARREN_TOKEN": secret})
        assert r.returncode != 0 and "admin" in r.stderr
    finally:
        r = server.cli("token", "rm", name)
        assert r.returncode == 0, r.stderr
    r = server.cli("ls", env={"WARREN_TOKEN": secret})
    assert r.returncode != 0 and "bearer token" in r.stderr, r.stderr


@pytest.mark.serve_only("kills an init found through warren serve's /run files")
def test_a_failed_sandbox_gives_its_quota_back_once(server, image, tokens):
    """A sandbox whose init died is `failed`: it runs nothing, so its share of the quota comes
    back at once (the record stays until deleted, and deleting it gives nothing back twice)."""
    import hashlib
    import json
    import signal

    _, t = tokens(max_sandboxes=2)
    ids = []
    try:
        for _ in range(2):
            r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
            assert r.status == 201, r
            ids.append(r.json["id"])
        u.assert_error(as_(server, t, "POST", "/v1/sandboxes", {"image": image}), 429, "quota")
        parent = "warren-" + hashlib.sha256(os.path.realpath(server.data_dir).encode()).hexdigest()[:8]
        with open(f"/run/warren/{parent}/{ids[0]}.json") as f:
            os.kill(json.load(f)["pid"], signal.SIGKILL)  # its init, which we started through the server
        assert u.wait_until(lambda: as_(server, t, "GET", f"/v1/sandboxes/{ids[0]}").json["state"] == "failed", timeout=20)
        r = as_(server, t, "POST", "/v1/sandboxes", {"image": image})
        assert r.status == 201, r
        ids.append(r.json["id"])
        # Deleting the failed one gives back nothing more: two are live, the quota is 2.
        assert as_(server, t, "DELETE", f"/v1/sandboxes/{ids.pop(0)}").status == 204
        u.assert_error(as_(server, t, "POST", "/v1/sandboxes", {"image": image}), 429, "quota")
    finally:
        _cleanup(server, ids)
