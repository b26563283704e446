"""The CLI against a real server: exit codes, isolation, limits, cleanup, cp, errors."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time

import pytest

import e2e_util as u

ERROR_LINE = re.compile(r"^warren: .+: .+$")


@pytest.fixture
def sandbox_id(server, image, sandboxes):
    """A sandbox made with `warren create`; removed after the test whatever happens."""
    r = server.cli("create", "--image", image)
    assert r.returncode == 0, f"warren create failed ({r.returncode}): {r.stderr}"
    sid = r.stdout.strip()
    assert sid and "\n" not in sid and " " not in sid, f"warren create printed {r.stdout!r}"
    sandboxes.append(sid)
    return sid


def _exec(server, sid, *cmd, timeout=120, flags=()):
    return server.cli("exec", sid, *flags, "--", *cmd, timeout=timeout)


def _bg_sleep(server, sid, secs: str):
    """Start `sleep SECS` in the sandbox through `warren exec` in the background."""
    return subprocess.Popen([server.bin, "exec", sid, "--", "sleep", secs], env=server.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)


def test_run_prints_and_exits_with_command_code(server, image):
    r = server.cli("run", "--image", image, "--", "sh", "-c", "echo hi; exit 3")
    assert r.stdout == "hi\n", r
    assert r.returncode == 3, r


def test_run_stderr_goes_to_stderr(server, image):
    r = server.cli("run", "--image", image, "--", "sh", "-c", "echo out; echo err >&2")
    assert r.returncode == 0, r
    assert r.stdout == "out\n" and r.stderr == "err\n", r


def test_run_signal_exit_code(server, image):
    r = server.cli("run", "--image", image, "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == 128 + 15, r


def test_root_inside_unprivileged_outside(server, image, sandbox_id):
    r = _exec(server, sandbox_id, "id", "-u")
    assert r.returncode == 0 and r.stdout.strip() == "0", r

    p = _bg_sleep(server, sandbox_id, "37")
    try:
        found = u.find_sandboxed(["sleep", "37"])
        assert found, "no host process `sleep 37` in another pid namespace"
        for pid in found:
            ids = u.uids(pid)
            assert ids is not None
            assert 0 not in ids, f"sandboxed process {pid} has host uid(s) {ids}: root on the host"
    finally:
        _stop(p)


def test_hostname_differs(server, image):
    r = server.cli("run", "--image", image, "--", "hostname")
    assert r.returncode == 0, r
    assert r.stdout.strip() and r.stdout.strip() != socket.gethostname(), r


def test_proc_shows_only_sandbox_processes(server, image):
    r = server.cli("run", "--image", image, "--", "sh", "-c",
                   "ls /proc | grep -c '^[0-9][0-9]*$'; "
                   "tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/1/comm")
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    n = int(lines[0])
    host_n = len(u.pids())
    assert 1 <= n <= 8, f"{n} pids visible in the sandbox's /proc (host has {host_n}):\n{r.stdout}"
    pid1 = (lines[1] + " " + lines[2]).lower() if len(lines) >= 3 else ""
    assert "agent" in pid1 or "warren" in pid1, f"pid 1 in the sandbox is not the agent: {lines[1:]}"


def test_only_loopback_network(server, image):
    r = server.cli("run", "--image", image, "--", "cat", "/proc/net/dev")
    assert r.returncode == 0, r
    ifaces = sorted(l.split(":", 1)[0].strip() for l in r.stdout.splitlines()[2:] if ":" in l)
    assert ifaces == ["lo"], f"interfaces in the sandbox: {ifaces}"


# Allocates ~256 MiB of anonymous memory in the shell itself (command substitution grows a
# buffer in the shell's heap, up to ~2x the data), so it is charged to the sandbox cgroup.
ALLOC_256M = "x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo ok"


def test_memory_limit_kills_with_137(server, image):
    t0 = time.time()
    r = server.cli("run", "--image", image, "--memory", "64M", "--", "sh", "-c", ALLOC_256M, timeout=300)
    assert r.returncode == 137, f"256 MiB in a 64M sandbox: exit {r.returncode}, {r!r}"
    assert "ok" not in r.stdout
    assert time.time() - t0 < 120
    u.assert_alive(server)


def test_memory_control_without_tight_limit(server, image):
    """The same program runs to the end with enough memory: the 137 above is the limit's doing."""
    r = server.cli("run", "--image", image, "--memory", "1024M", "--", "sh", "-c", ALLOC_256M, timeout=300)
    assert r.returncode == 0 and r.stdout == "ok\n", r


def test_rm_leaves_nothing_behind(server, image, sandbox_id):
    sid = sandbox_id
    listed = server.http("GET", "/v1/sandboxes").json["sandboxes"]
    assert [s["id"] for s in listed] == [sid], \
        f"precondition: only this sandbox alive (uid check below is per host uid), got {listed}"

    p = _bg_sleep(server, sid, "38")
    try:
        found = u.find_sandboxed(["sleep", "38"])
        assert found, "no host process `sleep 38` in another pid namespace"
        pid = found[0]
        host_uid = u.uids(pid)[0]
        pidns = u.ns(pid, "pid")
        cgdirs = [d for d in u.cgroup_dirs_of(pid)
                  if d not in u.cgroup_dirs_of(os.getpid()) and not os.path.ismount(d)]
        assert host_uid != 0
        assert cgdirs, f"sandbox process {pid} shares all our cgroups: {u.cgroup_dirs_of(pid)}"

        r = server.cli("rm", sid)
        assert r.returncode == 0, r
    finally:
        _stop(p)

    # processes: none in the sandbox's pid namespace and none with its host uid
    left = u.wait_until(lambda: not u.processes_in_ns(pidns) and not u.processes_with_uid(host_uid), 10)
    assert left, (f"after rm: processes in the sandbox pidns: {u.processes_in_ns(pidns)}, "
                  f"with host uid {host_uid}: {u.processes_with_uid(host_uid)}")
    # mounts: no line mentioning the id, in our namespace or the server's
    for who in ("self", server.proc.pid):
        lines = [l for l in u.mountinfo(who) if sid in l]
        assert not lines, f"mounts left in mount ns of {who}: {lines}"
    # cgroups: the sandbox's own cgroup dirs are gone, and no dir is named after it
    still = [d for d in cgdirs if os.path.exists(d)]
    assert not still, f"cgroup dirs left after rm: {still}"
    named = u.cgroup_dirs_named(sid)
    assert not named, f"cgroup dirs named after the sandbox left: {named}"
    # files: nothing in the data dir is named after it
    files = [os.path.join(d, n) for d, dirs, names in os.walk(server.data_dir) for n in dirs + names if sid in n]
    assert not files, f"files left in the data dir after rm: {files}"
    # and the API no longer knows it
    r = server.cli("inspect", sid)
    assert r.returncode != 0, r


def test_exec_timeout_exits_124(server, image, sandbox_id):
    t0 = time.time()
    r = _exec(server, sandbox_id, "sleep", "30", flags=("--timeout", "1"))
    assert r.returncode == 124, r
    assert time.time() - t0 < 20


def test_exec_cwd_and_env(server, image, sandbox_id):
    r = _exec(server, sandbox_id, "sh", "-c", "pwd; echo $FOO",
              flags=("--cwd", "/tmp", "--env", "FOO=bar baz"))
    assert r.returncode == 0 and r.stdout == "/tmp\nbar baz\n", r


def test_run_env_and_label_flags(server, image):
    r = server.cli("run", "--image", image, "--env", "A=1", "--label", "k=v", "--", "sh", "-c", "echo $A")
    assert r.returncode == 0 and r.stdout == "1\n", r


def test_exec_passes_stdout_bytes(server, image, sandbox_id):
    r = _exec(server, sandbox_id, "seq", "1", "2000")
    assert r.returncode == 0
    assert r.stdout == "".join(f"{i}\n" for i in range(1, 2001))


def test_cp_both_directions(server, image, sandbox_id, tmp_path):
    sid = sandbox_id
    payload = os.urandom(200_000) + b"\n\x00tail"
    src = tmp_path / "in.bin"
    src.write_bytes(payload)
    r = server.cli("cp", str(src), f"{sid}:/tmp/in.bin")
    assert r.returncode == 0, r
    r = _exec(server, sid, "wc", "-c", "/tmp/in.bin")
    assert r.returncode == 0 and r.stdout.split()[0] == str(len(payload)), r

    r = _exec(server, sid, "sh", "-c", "cp /tmp/in.bin /root/out.bin && echo made-inside >> /root/out.bin")
    assert r.returncode == 0, r
    dst = tmp_path / "out.bin"
    r = server.cli("cp", f"{sid}:/root/out.bin", str(dst))
    assert r.returncode == 0, r
    assert dst.read_bytes() == payload + b"made-inside\n"
    # Into a directory, as cp(1): the source's file name, both ways.
    into = tmp_path / "dir"
    into.mkdir()
    r = server.cli("cp", f"{sid}:/root/out.bin", str(into))
    assert r.returncode == 0 and (into / "out.bin").read_bytes() == payload + b"made-inside\n", r
    up = tmp_path / "up.bin"
    up.write_bytes(b"up\n")
    r = server.cli("cp", str(up), f"{sid}:/tmp/")
    assert r.returncode == 0, r
    assert _exec(server, sid, "cat", "/tmp/up.bin").stdout == "up\n"


def test_create_beside_another_with_a_node_selector(server, image, sandbox_id):
    """`--node-selector warren.node=NODE` puts a sandbox on the node another one runs on (every
    node carries its name as a label); a label no node carries is refused, and nothing is made."""
    node = json.loads(server.cli("inspect", sandbox_id).stdout)["node"]
    r = server.cli("create", "--image", image, "--node-selector", f"warren.node={node}")
    assert r.returncode == 0, r
    beside = r.stdout.strip()
    try:
        doc = json.loads(server.cli("inspect", beside).stdout)
        assert doc["node"] == node and doc["node_selector"] == {"warren.node": node}, doc
    finally:
        assert server.cli("rm", beside).returncode == 0
    before = server.cli("ls").stdout
    r = server.cli("create", "--image", image, "--node-selector", "zone=nowhere")
    assert r.returncode != 0 and "node_selector" in r.stderr, r
    assert server.cli("ls").stdout == before


def test_ls_inspect_and_image_ls(server, image, sandbox_id):
    r = server.cli("ls")
    assert r.returncode == 0 and sandbox_id in r.stdout, r
    r = server.cli("inspect", sandbox_id)
    assert r.returncode == 0, r
    doc = json.loads(r.stdout)
    assert doc["id"] == sandbox_id and doc["state"] == "running" and doc["image"] == image, doc
    r = server.cli("image", "ls")
    assert r.returncode == 0, r
    assert any(image in line.split() or line.split()[:2] == ["t", "1"]
               for line in r.stdout.splitlines()), f"{image} not in `warren image ls`:\n{r.stdout}"


@pytest.mark.parametrize("args", [
    ("exec", "sb-does-not-exist", "--", "true"),
    ("inspect", "sb-does-not-exist"),
    ("rm", "sb-does-not-exist"),
    ("cp", "sb-does-not-exist:/etc/passwd", "/tmp/warren-e2e-never-written"),
])
def test_unknown_sandbox_error_line(server, args):
    r = server.cli(*args)
    assert r.returncode != 0, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), f"stderr: {r.stderr!r}"
    assert r.stdout == "", r
    assert not os.path.exists("/tmp/warren-e2e-never-written")


def test_unknown_image_error_line(server):
    r = server.cli("run", "--image", "no-such-image:0", "--", "true")
    assert r.returncode != 0, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), f"stderr: {r.stderr!r}"
    assert "no-such-image" in lines[0]
    listed = server.http("GET", "/v1/sandboxes").json["sandboxes"]
    assert not [s for s in listed if s.get("image") == "no-such-image:0"], listed


def test_bad_token_error_line(server):
    r = server.cli("ls", env={"WARREN_TOKEN": "not-the-token"})
    assert r.returncode != 0, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), f"stderr: {r.stderr!r}"


def test_admin_token_file_mode(server):
    assert server.token_mode == 0o600, oct(server.token_mode)


def test_image_build_ls_rm(server, image):
    ref = "e2e-extra:v1"
    r = server.cli("image", "build", ref, "--from-dir", server.rootfs, timeout=300)
    assert r.returncode == 0, r
    try:
        r = server.cli("image", "ls")
        assert r.returncode == 0 and any(ref in l.split() or l.split()[:2] == ["e2e-extra", "v1"]
                                         for l in r.stdout.splitlines()), r.stdout
        r = server.cli("run", "--image", ref, "--", "cat", "/etc/marker")
        assert r.returncode == 0 and r.stdout == "warren-e2e-rootfs\n", r
    finally:
        rm = server.cli("image", "rm", ref)
    assert rm.returncode == 0, rm
    r = server.cli("image", "ls")
    assert not any(ref in l.split() or l.split()[:2] == ["e2e-extra", "v1"] for l in r.stdout.splitlines()), r.stdout
    r = server.cli("run", "--image", ref, "--", "true")
    assert r.returncode != 0 and ERROR_LINE.match(r.stderr.strip()), r
    r = server.cli("image", "rm", ref)
    assert r.returncode != 0 and ERROR_LINE.match(r.stderr.strip()), r


def test_create_count_prints_what_was_made_when_a_chunk_fails(tmp_path):
    """`warren create --count N --json` against a server that answers the first batch and then
    fails: the sandboxes already made are printed (they are the caller's to delete), then the
    error, and the exit code is not 0."""
    import http.server
    import threading
    from conftest import _warren_bin

    calls = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            calls.append(self.path)
            if len(calls) == 1:
                body = json.dumps({"sandboxes": [{"id": "sb-00000000000000a1"}, {"id": "sb-00000000000000a2"}],
                                   "errors": []}).encode()
                self.send_response(200)
            else:
                body = json.dumps({"error": {"code": "unavailable", "message": "node restarting"}}).encode()
                self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{srv.server_address[1]}", WARREN_TOKEN="t",
                   WARREN_HOME=str(tmp_path))
        r = subprocess.run([str(_warren_bin()), "create", "--image", "x:1", "--count", "40", "--json"],
                           capture_output=True, text=True, timeout=60, env=env)
    finally:
        srv.shutdown()
    assert calls == ["/v1/sandboxes:batch", "/v1/sandboxes:batch"], calls
    assert r.returncode != 0
    doc = json.loads(r.stdout)
    assert [s["id"] for s in doc["sandboxes"]] == ["sb-00000000000000a1", "sb-00000000000000a2"], r.stdout
    assert "2 of 40 sandboxes were made" in r.stderr and "node restarting" in r.stderr, r.stderr
