"""The HTTP API's edges: bad input gets the contract's error shape and the server lives on."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import time
import urllib.parse

import pytest

import e2e_util as u


@pytest.fixture
def sb(server, image):
    """A sandbox for one test; deleted after it."""
    r = server.http("POST", "/v1/sandboxes", {"image": image, "env": {"FROM_SPEC": "spec"}})
    assert r.status == 201, r
    sid = r.json["id"]
    try:
        yield sid
    finally:
        server.http("DELETE", "/v1/sandboxes/" + sid)


def _exec(server, sid, body, status=200):
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", body)
    assert r.status == status, f"exec {body!r}: {r!r}"
    return r.json


def _count_sandboxes(server) -> int:
    return len(server.http("GET", "/v1/sandboxes").json["sandboxes"])


# -- auth ---------------------------------------------------------------------
def test_healthz_without_auth(server):
    r = server.http("GET", "/healthz", auth=False)
    assert r.status == 200 and r.json.get("ok") is True, r


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": "Bearer "},
    {"Authorization": "Basic YWRtaW46YWRtaW4="},
    {"Authorization": "bearer"},
])
def test_missing_or_bad_auth(server, image, headers):
    before = _count_sandboxes(server)
    r = server.http("GET", "/v1/sandboxes", auth=False, headers=headers)
    u.assert_error(r, 401, "unauthorized")
    r = server.http("POST", "/v1/sandboxes", {"image": image}, auth=False, headers=headers)
    u.assert_error(r, 401, "unauthorized")
    assert _count_sandboxes(server) == before
    u.assert_alive(server)


def test_token_prefix_is_not_enough(server):
    r = server.http("GET", "/v1/sandboxes", token=server.token[:-1])
    u.assert_error(r, 401, "unauthorized")
    r = server.http("GET", "/v1/sandboxes", token=server.token + "x")
    u.assert_error(r, 401, "unauthorized")


# -- malformed input ----------------------------------------------------------
@pytest.mark.parametrize("body", [
    b"{not json",
    b'{"image": "t:1"',
    b"[1, 2]",
    b"null",
    b'"t:1"',
    b'{"image": "t:1"} trailing',
    b"\xff\xfe\x00garbage",
])
def test_malformed_json(server, image, body):
    before = _count_sandboxes(server)
    r = server.http("POST", "/v1/sandboxes", body, headers={"Content-Type": "application/json"})
    u.assert_error(r, 400, "invalid")
    assert _count_sandboxes(server) == before
    u.assert_alive(server)


@pytest.mark.parametrize("extra", [
    {"bogus_field": 1},
    {"network": {"mode": "none", "allow": [], "bogus_field": 1}},
])
def test_unknown_fields_in_spec(server, image, extra):
    r = server.http("POST", "/v1/sandboxes", {"image": image, **extra})
    err = u.assert_error(r, 400, "invalid")
    assert "bogus_field" in err["message"], err


@pytest.mark.parametrize("spec", [
    {"image": 5},
    {"image": ["t:1"]},
    {"memory_mb": "lots"},
    {"memory_mb": -5},
    {"cpu": "one"},
    {"pids": 1.5e30},
    {"labels": ["a", "b"]},
    {"labels": {"k": 1}},
    {"env": {"A": 1}},
    {"env": "A=1"},
    {"tools": "x:1"},
    {"ttl_s": "soon"},
    {"network": "none"},
    {"network": {"mode": "bogus", "allow": []}},
    {"backend": "teleport"},
])
def test_wrong_types_in_spec(server, image, spec):
    before = _count_sandboxes(server)
    body = {"image": image, **spec}
    r = server.http("POST", "/v1/sandboxes", body)
    u.assert_error(r, 400, "invalid")
    assert _count_sandboxes(server) == before
    u.assert_alive(server)


def test_unknown_image(server):
    r = server.http("POST", "/v1/sandboxes", {"image": "no-such-image:0"})
    err = u.assert_error(r, 400, "invalid")
    assert "no-such-image:0" in err["message"], err


@pytest.mark.parametrize("body", [
    {},
    {"argv": "echo hi"},
    {"argv": []},
    {"argv": [1, 2]},
    {"cmd": 5},
    {"argv": ["true"], "timeout_s": "1"},
    {"argv": ["true"], "env": ["A=1"]},
    {"argv": ["true"], "env": {"A": 1}},
    {"argv": ["true"], "cwd": 7},
    {"argv": ["true"], "wait": "yes"},
    {"argv": ["true"], "stdin_b64": "!!! not base64 !!!"},
    {"argv": ["true"], "max_output_bytes": -1},
    {"argv": ["true"], "bogus_field": 1},
])
def test_bad_exec_requests(server, sb, body):
    r = server.http("POST", f"/v1/sandboxes/{sb}/exec", body)
    u.assert_error(r, 400, "invalid")
    u.assert_alive(server)


def test_bad_network_policy(server, sb):
    for body in ({"mode": "sometimes"}, {"mode": "egress", "allow": "pypi.org"},
                 {"mode": "none", "allow": [], "bogus_field": True}, [1]):
        r = server.http("PUT", f"/v1/sandboxes/{sb}/network", body)
        u.assert_error(r, 400, "invalid")


def test_huge_json_body(server):
    body = b'{"image": "' + b"a" * (64 << 20) + b'"}'
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        conn.putrequest("POST", "/v1/sandboxes")
        conn.putheader("Authorization", "Bearer " + server.token)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        try:
            for i in range(0, len(body), 1 << 20):
                conn.send(body[i:i + (1 << 20)])
        except (BrokenPipeError, ConnectionResetError):
            pass   # the server may answer early and stop reading; its answer must still come
        resp = conn.getresponse()
        r = u.Response(resp.status, resp.headers, resp.read())
    finally:
        conn.close()
    u.assert_error(r, (400, 413), None)
    u.assert_alive(server)


def test_huge_declared_content_length(server):
    """A Content-Length of 1 TB is refused up front, not waited for."""
    with socket.create_connection((server.host, server.port), timeout=15) as s:
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                  b"Authorization: Bearer " + server.token.encode() + b"\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{")
        t0 = time.time()
        resp = http.client.HTTPResponse(s)
        resp.begin()
        r = u.Response(resp.status, resp.headers, resp.read())
    assert time.time() - t0 < 10
    u.assert_error(r, (400, 413), None)
    u.assert_alive(server)


def test_garbage_request_line(server):
    with socket.create_connection((server.host, server.port), timeout=15) as s:
        s.sendall(b"\x16\x03\x01 NOT HTTP AT ALL\r\n\r\n")
        try:
            data = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            data = b""
    assert data == b"" or data.startswith(b"HTTP/1.") and b" 400 " in data.split(b"\r\n")[0], data[:200]
    u.assert_alive(server)


# -- bad paths ----------------------------------------------------------------
@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/nope"),
    ("GET", "/v3/sandboxes"),  # (/v2/sandboxes is E2B's list: docs/e2b.md)
    ("GET", "/v1/sandboxes/sb-does-not-exist"),
    ("DELETE", "/v1/sandboxes/sb-does-not-exist"),
    ("PUT", "/v1/sandboxes/sb-does-not-exist/network"),
    ("GET", "/v1/sandboxes/sb-does-not-exist/execs/x"),
    ("GET", "/v1/sandboxes/sb-does-not-exist/files?path=/etc/passwd"),
    ("GET", "/v1/sandboxes/..%2F..%2Fetc%2Fpasswd"),
    ("GET", "/v1/sandboxes/../../etc/passwd"),
    ("DELETE", "/v1/layers/no-such:layer"),
])
def test_not_found_paths(server, method, path):
    r = server.http(method, path)
    u.assert_error(r, 404, "not_found")
    u.assert_alive(server)


def test_exec_on_unknown_sandbox(server):
    r = server.http("POST", "/v1/sandboxes/sb-does-not-exist/exec", {"argv": ["true"]})
    u.assert_error(r, 404, "not_found")


def test_unknown_exec_id(server, sb):
    r = server.http("GET", f"/v1/sandboxes/{sb}/execs/no-such-exec")
    u.assert_error(r, 404, "not_found")
    r = server.http("GET", f"/v1/sandboxes/{sb}/execs/no-such-exec/stream?after=0")
    u.assert_error(r, 404, "not_found")


@pytest.mark.parametrize("method,path,allow", [
    ("PATCH", "/v1/sandboxes", "GET, POST"),
    ("DELETE", "/healthz", "GET, HEAD"),
    ("PUT", "/v1/sandboxes", "GET, POST"),
    ("POST", "/v1/nodes", "GET"),
    ("DELETE", "/metrics", "GET"),
    ("GET", "/v1/sandboxes:batch", "POST"),
    ("GET", "/v1/calls", "POST"),
    ("PUT", "/v1/layers", "GET, POST"),
    ("GET", "/v1/leases", "POST"),
    ("POST", "/v1/tokens/x", "DELETE"),
    ("POST", "/v1/trajectories/x", "GET"),
])
def test_wrong_method(server, method, path, allow):
    """A method the path does not take: 405 with an Allow header naming the ones it takes."""
    r = server.http(method, path, b"{}")
    u.assert_error(r, 405, "invalid")
    assert r.headers.get("Allow") == allow, r.headers


def test_wrong_method_on_a_sandbox_path(server, sb):
    for method, sub, allow in (("POST", "", "GET, DELETE"), ("GET", "/exec", "POST"), ("GET", "/network", "PUT"),
                               ("POST", "/files", "GET, PUT"), ("GET", "/pause", "POST"),
                               ("POST", "/filesystem", "PUT"), ("POST", "/changes", "GET"),
                               ("DELETE", "/archive", "GET, PUT")):
        r = server.http(method, f"/v1/sandboxes/{sb}{sub}", b"{}")
        u.assert_error(r, 405, "invalid")
        assert r.headers.get("Allow") == allow, (method, sub, r.headers)


@pytest.mark.parametrize("path", ["/v1/sandboxes/a%00b", "/%00", "//v1//sandboxes/..", "/v1/sandboxes/" + "x" * 5000])
def test_weird_paths(server, path):
    r = server.http("GET", path)
    assert 400 <= r.status < 500, r
    u.assert_error(r, r.status, None)
    u.assert_alive(server)


# -- files: paths stay inside the sandbox ---------------------------------------
def _files(server, sid, method, path, body=None, **q):
    query = urllib.parse.urlencode({"path": path, **q}) if path is not None else urllib.parse.urlencode(q)
    return server.http(method, f"/v1/sandboxes/{sid}/files" + ("?" + query if query else ""), body,
                       headers={"Content-Type": "application/octet-stream"} if body is not None else None)


def test_files_roundtrip_and_errors(server, sb):
    blob = os.urandom(300_000)
    r = _files(server, sb, "PUT", "/tmp/blob", blob, mode="0600")
    assert r.status == 204, r
    r = _files(server, sb, "GET", "/tmp/blob")
    assert r.status == 200 and r.body == blob, r.status
    assert _exec(server, sb, {"cmd": "stat -c %a /tmp/blob"})["stdout"] == "600\n"
    u.assert_error(_files(server, sb, "GET", "/tmp/nope"), 404, "not_found")
    u.assert_error(_files(server, sb, "GET", "tmp/blob"), 400, "invalid")          # relative
    u.assert_error(_files(server, sb, "PUT", "relative/x", b"x"), 400, "invalid")
    u.assert_error(_files(server, sb, "GET", None), 400, "invalid")                 # no path
    u.assert_error(_files(server, sb, "PUT", "/tmp/m", b"x", mode="rwx"), 400, "invalid")
    r = _files(server, sb, "GET", "/tmp")                                           # a directory
    assert 400 <= r.status < 500, r
    u.assert_error(r, r.status, None)
    # Missing parent directories are made.
    assert _files(server, sb, "PUT", "/tmp/new/deeper/f.py", b"print(1)\n").status == 204
    assert _exec(server, sb, {"cmd": "stat -c %a /tmp/new/deeper; cat /tmp/new/deeper/f.py"})["stdout"] == "755\nprint(1)\n"
    # A file where a directory would go is an error, not a replacement.
    assert 400 <= _files(server, sb, "PUT", "/tmp/blob/under", b"x").status < 500


def test_files_traversal_stays_in_sandbox(server, sb):
    assert os.path.exists("/etc/shadow")
    # /.. at the root is the root: this is the sandbox's /etc, which has no shadow
    r = _files(server, sb, "GET", "/../../../../../etc/shadow")
    assert r.body != open("/etc/shadow", "rb").read()
    u.assert_error(r, (400, 404), None)
    r = _files(server, sb, "GET", "/tmp/../../etc/marker")
    if r.status == 200:
        assert r.body == b"warren-e2e-rootfs\n", r
    else:
        u.assert_error(r, 400, "invalid")


def test_files_symlinks_resolve_inside_sandbox(server, sb):
    host_dir = f"/var/tmp/warren-e2e-escape-{os.getpid()}"
    os.makedirs(host_dir, exist_ok=True)
    name = f"warren-e2e-{os.getpid()}"
    try:
        res = _exec(server, sb, {"cmd": f"ln -sf /etc/shadow /tmp/shadowlink; ln -sfn {host_dir} /tmp/esc; "
                                        f"ln -sfn /etc /tmp/etclink"})
        assert res["exit_code"] == 0, res
        r = _files(server, sb, "GET", "/tmp/shadowlink")
        assert r.body != open("/etc/shadow", "rb").read(), "read the HOST's /etc/shadow through a symlink"
        u.assert_error(r, (400, 403, 404), None)

        r = _files(server, sb, "PUT", f"/tmp/esc/{name}", b"pwned")
        assert not os.path.exists(f"{host_dir}/{name}"), "wrote a HOST file through a symlink"
        r = _files(server, sb, "PUT", f"/tmp/etclink/{name}", b"inside")
        assert not os.path.exists(f"/etc/{name}"), "wrote into the HOST's /etc through a symlink"
        if r.status == 204:
            assert _files(server, sb, "GET", f"/etc/{name}").body == b"inside"
    finally:
        for p in (f"{host_dir}/{name}", f"/etc/{name}"):
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(host_dir) if os.path.isdir(host_dir) and not os.listdir(host_dir) else None


# -- exec ---------------------------------------------------------------------
def test_exec_basic_fields(server, sb):
    res = _exec(server, sb, {"argv": ["sh", "-c", "echo out; echo err >&2; exit 42"]})
    for k in ("exec_id", "state", "exit_code", "signal", "timed_out", "stdout", "stderr",
              "stdout_truncated", "stderr_truncated", "duration_ms", "replayed"):
        assert k in res, f"ExecResult without {k}: {res}"
    assert res["state"] == "exited" and res["exit_code"] == 42 and res["signal"] is None
    assert res["stdout"] == "out\n" and res["stderr"] == "err\n" and res["timed_out"] is False


def test_exec_binary_output(server, sb):
    res = _exec(server, sb, {"argv": ["sh", "-c", "printf 'ok\\377\\000\\001'; printf '\\376' >&2"],
                             "binary": True})
    assert base64.b64decode(res["stdout_b64"]) == b"ok\xff\x00\x01", res
    assert base64.b64decode(res["stderr_b64"]) == b"\xfe", res
    assert res["stdout"].startswith("ok\ufffd"), res        # the text twin: invalid bytes replaced
    res = _exec(server, sb, {"argv": ["sh", "-c", "printf 'ok\\377'"]})
    assert res["stdout"] == "ok\ufffd", res                # always valid UTF-8 text
    json.dumps(res, ensure_ascii=False).encode("utf-8")


def test_exec_stdin(server, sb):
    res = _exec(server, sb, {"argv": ["cat"], "stdin": "hello\nwörld"})
    assert res["stdout"] == "hello\nwörld", res
    raw = bytes(range(256)) * 64
    res = _exec(server, sb, {"argv": ["cat"], "stdin_b64": base64.b64encode(raw).decode(), "binary": True})
    assert base64.b64decode(res["stdout_b64"]) == raw
    res = _exec(server, sb, {"argv": ["wc", "-c"]})                  # no stdin: EOF at once
    assert res["stdout"].strip() == "0", res


def test_exec_env_and_cwd(server, sb):
    res = _exec(server, sb, {"cmd": "echo \"$FOO|$FROM_SPEC\"; pwd", "env": {"FOO": "bar baz"}, "cwd": "/tmp"})
    assert res["stdout"] == "bar baz|spec\n/tmp\n", res
    res = _exec(server, sb, {"cmd": "echo $FROM_SPEC", "env": {"FROM_SPEC": "override"}})
    assert res["stdout"] == "override\n", res
    r = server.http("POST", f"/v1/sandboxes/{sb}/exec", {"argv": ["pwd"], "cwd": "/no/such/dir"})
    assert (r.status == 200 and r.json["exit_code"] != 0) or 400 <= r.status < 500, r


def test_exec_timeout_and_signal(server, sb):
    t0 = time.time()
    res = _exec(server, sb, {"cmd": "sleep 30", "timeout_s": 1})
    assert res["timed_out"] is True and res["exit_code"] == 124, res
    assert time.time() - t0 < 15
    res = _exec(server, sb, {"cmd": "kill -9 $$"})
    assert res["signal"] == "KILL" and res["timed_out"] is False, res


def test_exec_output_limit(server, sb):
    res = _exec(server, sb, {"cmd": "head -c 100000 /dev/zero | tr '\\0' x; echo done >&2",
                             "max_output_bytes": 1000})
    assert res["stdout_truncated"] is True and 0 < len(res["stdout"]) <= 1000, res
    assert res["stderr"] == "done\n" and res["stderr_truncated"] is False


def test_exec_async_and_poll(server, sb):
    r = server.http("POST", f"/v1/sandboxes/{sb}/exec", {"cmd": "sleep 1; echo late", "wait": False})
    assert r.status == 202, r
    exec_id = r.json["exec_id"]
    first = server.http("GET", f"/v1/sandboxes/{sb}/execs/{exec_id}").json
    assert first["state"] == "running", first
    deadline = time.time() + 30
    while True:
        res = server.http("GET", f"/v1/sandboxes/{sb}/execs/{exec_id}").json
        if res["state"] == "exited" or time.time() > deadline:
            break
        time.sleep(0.1)
    assert res["state"] == "exited" and res["exit_code"] == 0 and res["stdout"] == "late\n", res


def test_stream_and_resume_with_after(server, sb):
    r = server.http("POST", f"/v1/sandboxes/{sb}/exec",
                    {"cmd": "for i in $(seq 1 20); do echo line$i; done; echo fin >&2; exit 7", "wait": False})
    assert r.status == 202, r
    exec_id = r.json["exec_id"]
    path = f"/v1/sandboxes/{sb}/execs/{exec_id}/stream"
    r = server.http("GET", path + "?after=0", headers={"Accept": "application/x-ndjson"})
    assert r.status == 200, r
    assert r.headers.get("Content-Type", "").startswith("application/x-ndjson"), dict(r.headers)
    lines = u.ndjson_lines(r.body)
    data, last = lines[:-1], lines[-1]
    assert "result" in last and last["result"]["exit_code"] == 7, last
    seqs = [d["seq"] for d in data]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert last["seq"] > seqs[-1]
    assert "".join(d["data"] for d in data if d["stream"] == "stdout") == "".join(f"line{i}\n" for i in range(1, 21))
    assert "".join(d["data"] for d in data if d["stream"] == "stderr") == "fin\n"

    k = seqs[len(seqs) // 2]
    tail = u.ndjson_lines(server.http("GET", path + f"?after={k}").body)
    assert tail[:-1] == [d for d in data if d["seq"] > k], tail
    assert tail[-1] == last
    only = u.ndjson_lines(server.http("GET", path + f"?after={seqs[-1]}").body)
    assert only == [last], only
    u.assert_error(server.http("GET", path + "?after=abc"), 400, "invalid")
    u.assert_error(server.http("GET", path + "?after=-1"), 400, "invalid")


def test_stream_live_and_dropped_connection(server, sb):
    """Lines arrive while the command runs; a client that drops and comes back with after= resumes."""
    r = server.http("POST", f"/v1/sandboxes/{sb}/exec",
                    {"cmd": "echo a; sleep 2; echo b; sleep 1; echo c", "wait": False})
    exec_id = r.json["exec_id"]
    path = f"/v1/sandboxes/{sb}/execs/{exec_id}/stream?after=0"
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    t0 = time.time()
    conn.request("GET", path, headers={"Authorization": "Bearer " + server.token})
    resp = conn.getresponse()
    assert resp.status == 200
    first = json.loads(resp.readline())
    assert first["data"] == "a\n" and time.time() - t0 < 1.8, (first, time.time() - t0)
    conn.close()                                                # drop mid-stream
    rest = u.ndjson_lines(server.http("GET", path.replace("after=0", f"after={first['seq']}")).body)
    assert "".join(d.get("data", "") for d in rest[:-1]) == "b\nc\n", rest
    assert rest[-1]["result"]["exit_code"] == 0
    u.assert_alive(server)


def test_stream_binary(server, sb):
    r = server.http("POST", f"/v1/sandboxes/{sb}/exec",
                    {"argv": ["sh", "-c", "printf '\\377\\001'"], "wait": False, "binary": True})
    exec_id = r.json["exec_id"]
    lines = u.ndjson_lines(server.http("GET", f"/v1/sandboxes/{sb}/execs/{exec_id}/stream?after=0").body)
    raw = b"".join(base64.b64decode(l["data_b64"]) for l in lines[:-1])
    assert raw == b"\xff\x01", lines


def test_sandbox_object_and_list_filters(server, image):
    label = u.unique("api")
    r = server.http("POST", "/v1/sandboxes", {"image": image, "labels": {"suite": label}, "memory_mb": 128})
    assert r.status == 201, r
    doc = r.json
    try:
        for k in ("id", "state", "image", "memory_mb", "labels", "created_at", "backend", "network"):
            assert k in doc, f"Sandbox without {k}: {doc}"
        assert doc["state"] == "running" and doc["memory_mb"] == 128 and doc["labels"] == {"suite": label}
        assert server.http("GET", "/v1/sandboxes/" + doc["id"]).json["id"] == doc["id"]
        q = urllib.parse.quote(f"suite={label}", safe="=")
        got = server.http("GET", f"/v1/sandboxes?label={q}").json["sandboxes"]
        assert [s["id"] for s in got] == [doc["id"]], got
        got = server.http("GET", f"/v1/sandboxes?label={q}&state=paused").json["sandboxes"]
        assert got == [], got
        got = server.http("GET", "/v1/sandboxes?label=suite=nothing-has-this").json["sandboxes"]
        assert got == []
    finally:
        r = server.http("DELETE", "/v1/sandboxes/" + doc["id"])
    assert r.status == 204 and r.body == b"", r
    u.assert_error(server.http("GET", "/v1/sandboxes/" + doc["id"]), 404, "not_found")
    u.assert_error(server.http("DELETE", "/v1/sandboxes/" + doc["id"]), 404, "not_found")


def test_batch_create(server, image):
    label = u.unique("batch")
    r = server.http("POST", "/v1/sandboxes:batch", {"count": 2, "spec": {"image": image, "labels": {"b": label}}})
    ids = [s["id"] for s in (r.json.get("sandboxes") or [])] if r.status == 200 else []
    try:
        assert r.status == 200, r
        assert len(ids) == 2 and r.json.get("errors") == [], r
    finally:
        for sid in ids:
            server.http("DELETE", "/v1/sandboxes/" + sid)
    r = server.http("POST", "/v1/sandboxes:batch", {"count": 2, "spec": {"image": image, "bogus_field": 1}})
    u.assert_error(r, 400, "invalid")
    r = server.http("POST", "/v1/sandboxes:batch", {"count": "two", "spec": {"image": image}})
    u.assert_error(r, 400, "invalid")


def test_server_survived_everything(server):
    u.assert_alive(server)


@pytest.mark.serve_only("breaks a blob in warren serve's data dir")
def test_a_node_fault_is_500_with_a_request_id_and_no_host_path(server, image, tmp_path):
    """A failure of the node's own (here: an image whose blob vanished from the node's store) is
    not the tenant's `not_found`: 500 `internal`, naming the operation and the request id that
    the server's log has the details under, and no host path."""
    root = tmp_path / "tree"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "gone").write_text("soon\n")
    r = server.cli("image", "build", "api-vanished:1", "--from-dir", str(root))
    assert r.returncode == 0, r.stderr
    digest = r.stdout.split()[1]
    blob = os.path.join(server.data_dir, "blobs", "sha256", digest.split(":", 1)[1])
    os.rename(blob, blob + ".away")
    try:
        r = server.http("POST", "/v1/sandboxes", {"image": image, "workspace": "api-vanished:1"})
        err = u.assert_error(r, 500, "internal")
        rid = r.headers.get("X-Request-Id")
        assert rid and f"request {rid}" in err["message"], (r.headers, err)
        assert server.data_dir not in err["message"] and "/var/" not in err["message"], err
        with open(server.log_path) as f:
            assert any(rid in line and digest in line for line in f), "the log lacks the details"
    finally:
        os.rename(blob + ".away", blob)
        server.cli("image", "rm", "api-vanished:1")
