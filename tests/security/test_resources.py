"""Resource exhaustion (THREATS B.6 #44-#48, B.1 #8): the bomb stays inside its sandbox, the
daemon and a neighbour sandbox keep answering, and the bombed sandbox is usable or cleanly
deletable afterwards."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import List, Optional

import pytest

import e2e_util as u
from sec_util import healthy, one, parse_results, pick, server_rss_kb


def _start(server, sb, argv, timeout_s, **extra) -> str:
    body = {"argv": argv, "timeout_s": timeout_s, "wait": False}
    body.update(extra)
    r = server.http("POST", f"/v1/sandboxes/{sb.id}/exec", body)
    assert r.status in (200, 202), r
    return r.json["exec_id"]


def _wait(server, sb, exec_id, timeout: float) -> dict:
    deadline = time.time() + timeout
    while True:
        r = server.http("GET", f"/v1/sandboxes/{sb.id}/execs/{exec_id}", timeout=30)
        assert r.status == 200, r
        if r.json.get("state") == "exited":
            return r.json
        assert time.time() < deadline, f"exec {exec_id} still running after {timeout}s: {r.json}"
        time.sleep(0.3)


def _neighbour_ok(server, neighbour, within: float = 15.0) -> float:
    """The daemon answers /healthz and a neighbour sandbox runs a command; returns seconds."""
    t = time.time()
    assert healthy(server, timeout=within), "daemon /healthz failed during the attack"
    res = neighbour.exec(["/bin/echo", "neighbour"], timeout_s=within, http_timeout=within + 5)
    took = time.time() - t
    assert res["exit_code"] == 0 and res["stdout"] == "neighbour\n", res
    assert took < within, f"neighbour answered only after {took:.1f}s"
    return took


def _host_uid(sb) -> int:
    p = sb.probe()
    return int(p["uid_map"].split()[1])


def _eventually_usable(sb, within: float = 30.0) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        if sb.alive():
            return True
        time.sleep(1)
    return False


def _delete_cleanly(server, sb, host_uid: int) -> None:
    t = time.time()
    r = server.http("DELETE", f"/v1/sandboxes/{sb.id}", timeout=90)
    assert r.status in (204, 404), r
    assert time.time() - t < 60, f"delete took {time.time() - t:.1f}s"
    left = u.wait_until(lambda: not u.processes_with_uid(host_uid), timeout=20)
    assert left, f"processes of the sandbox's host uid {host_uid} left: {u.processes_with_uid(host_uid)}"


# --------------------------------------------------------------------------
# fork bombs (#44)
# --------------------------------------------------------------------------
def test_fork_bomb_is_capped_by_pids(make_sandbox, server):
    sb = make_sandbox(cli=True, pids=64)
    nb = make_sandbox(install=False)
    eid = _start(server, sb, ["/usr/local/bin/attack", "fork_bomb", "8", "0"], timeout_s=60)
    time.sleep(2)
    _neighbour_ok(server, nb)
    res = _wait(server, sb, eid, 90)
    r = one(parse_results(res["stdout"]), "fork_bomb")
    assert r["forks"] < 64, f"{r['forks']} processes forked with pids=64"
    assert r["fork_errno"] == "EAGAIN", r
    assert _eventually_usable(sb), "sandbox unusable after its fork bomb ended"
    assert healthy(server)


def test_shell_fork_bomb(make_sandbox, server):
    """The classic `:(){ :|:& };:` in busybox sh, ended by the exec timeout."""
    sb = make_sandbox(pids=128)
    uid = _host_uid(sb)
    nb = make_sandbox(install=False)
    eid = _start(server, sb, ["/bin/sh", "-c", ":(){ :|:& };:"], timeout_s=10)
    time.sleep(3)
    _neighbour_ok(server, nb)
    res = _wait(server, sb, eid, 120)
    assert res["state"] == "exited", res
    _neighbour_ok(server, nb)
    if not _eventually_usable(sb, 30):
        _delete_cleanly(server, sb, uid)
    assert healthy(server)


def test_fork_bomb_escaping_the_process_group(make_sandbox, server):
    """Children that setsid() survive the exec's process-group kill and hold every pid: the
    sandbox may stay full, but deleting it must be quick and leave no process behind."""
    sb = make_sandbox(pids=64)
    uid = _host_uid(sb)
    nb = make_sandbox(install=False)
    res = sb.exec(["/usr/local/bin/attack", "fork_bomb", "1", "1"], timeout_s=30)
    r = one(parse_results(res["stdout"]), "fork_bomb")
    assert r["forks"] < 64, r
    _neighbour_ok(server, nb)
    _delete_cleanly(server, sb, uid)
    _neighbour_ok(server, nb)


def test_cpu_hog(make_sandbox, server):
    """#48: more busy loops than the host has CPUs, in a sandbox limited to one CPU: the
    neighbour, the daemon and the hog's own agent keep answering."""
    sb = make_sandbox(cpu=1.0)
    nb = make_sandbox(install=False)
    eid = _start(server, sb, ["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait"],
                 timeout_s=20)
    time.sleep(2)
    _neighbour_ok(server, nb, within=10)
    t = time.time()
    assert sb.alive(), "the hog's own agent did not answer"
    assert time.time() - t < 15
    res = _wait(server, sb, eid, 60)
    assert res["timed_out"] is True and res["exit_code"] == 124, res
    assert _eventually_usable(sb, 10)


# --------------------------------------------------------------------------
# memory (#45)
# --------------------------------------------------------------------------
def test_memory_bomb_is_oom_killed(make_sandbox, server):
    sb = make_sandbox(cli=True, memory_mb=64)
    nb = make_sandbox(install=False)
    rss0 = server_rss_kb(server)
    eid = _start(server, sb, ["/usr/local/bin/attack", "mem_bomb", "4096"], timeout_s=120)
    time.sleep(0.5)
    _neighbour_ok(server, nb)  # while the bomb runs (or just after it was killed)
    res = _wait(server, sb, eid, 180)
    assert not pick(parse_results(res["stdout"]), "mem_bomb_survived"), f"4 GiB allocated under 64 MiB: {res}"
    assert res["exit_code"] == 137 or res.get("signal") in (9, "KILL", "SIGKILL"), res
    _neighbour_ok(server, nb)
    assert sb.alive(), "the agent died with its command (it should be OOM-protected)"
    assert server_rss_kb(server) - rss0 < 64 * 1024


# --------------------------------------------------------------------------
# disk and inodes (#46)
# --------------------------------------------------------------------------
def _statvfs_free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("target,limit_mb", [("/atk-fill", 32), ("/tmp/atk-fill", 32), ("/dev/shm/atk-fill", 64)])
def test_disk_fill(make_sandbox, server, target, limit_mb):
    """Writes until the filesystem says no: ENOSPC (or EFBIG) at the quota, the host's disks do
    not move, and the sandbox works again once the file is gone."""
    sb = make_sandbox(disk_mb=32)
    host_free = {p: _statvfs_free(p) for p in ("/", "/var/tmp", server.data_dir)}
    res = sb.exec(["/usr/local/bin/attack", "disk_fill", target, "1024"], timeout_s=120)
    r = one(parse_results(res["stdout"]), "disk_fill")
    assert r["ret"] < 0 and r["errno"] in ("ENOSPC", "EFBIG", "EDQUOT"), f"1 GiB written to {target}: {r}"
    assert r["bytes"] <= (limit_mb + 1) << 20, f"{r['bytes']} bytes written with a {limit_mb} MiB limit"
    for p, before in host_free.items():
        assert before - _statvfs_free(p) < 64 << 20, f"host free space on {p} dropped by {(before - _statvfs_free(p)) >> 20} MiB"
    rm = sb.exec(["/bin/rm", "-f", target], timeout_s=30)
    assert rm["exit_code"] == 0, rm
    assert sb.alive()
    assert healthy(server)


def test_disk_quota_above_memory_limit(make_sandbox, server):
    """disk_mb larger than memory_mb: the tmpfs pages count against the sandbox's memory, so
    filling the disk ends in the memory cgroup's OOM killer.  The writer must be the victim,
    not the agent (whose memfd makes it look bigger than a writer with a tiny RSS)."""
    sb = make_sandbox(disk_mb=256, memory_mb=64)
    res = sb.exec(["/usr/local/bin/attack", "disk_fill", "/atk-fill", "512"], timeout_s=120)
    r = pick(parse_results(res["stdout"]), "disk_fill")
    if r:
        assert r[0]["ret"] < 0, f"512 MiB written with disk_mb=256: {r[0]}"
    assert not res.get("error"), f"the sandbox's agent died: {res.get('error')}"
    assert sb.alive(), "the agent did not survive its sandbox's memory running out"
    assert healthy(server)


def test_kernel_memory_oom_with_lowered_score(make_sandbox, server):
    """The occupant first lowers its own oom_score_adj as far as the kernel lets it (back to
    the agent's level where the node could not lower the agent), then fills its memory cgroup
    with inodes: kernel memory that no process's RSS shows.  The OOM killer must still pick
    the occupant, not the agent (SECURITY.md: the OOM killer picks a command, never the agent)."""
    sb = make_sandbox(disk_mb=4096, memory_mb=64)
    uid = _host_uid(sb)
    res = sb.exec(["/bin/sh", "-c", "for v in -1000 -998 -500 0 500; do echo $v > /proc/self/oom_score_adj 2>/dev/null && break; done; "
                   "cat /proc/self/oom_score_adj >&2; exec /usr/local/bin/attack inode_fill /tmp/atk-inodes 2000000"],
                  timeout_s=120)
    # The agent must answer. A command it starts may itself be OOM-killed while the inodes
    # still fill the commands' cgroup (that memory stays charged until the files go), so
    # "answers" means a result with an exit status, not necessarily a successful echo.
    probe = sb.exec(["/bin/echo", "still-here"], timeout_s=20, http_timeout=40)
    if res.get("error") or probe.get("error") or probe.get("exit_code") is None:
        t = time.time()
        d = server.http("DELETE", f"/v1/sandboxes/{sb.id}", timeout=90)
        clean = u.wait_until(lambda: not u.processes_with_uid(uid), timeout=20)
        pytest.fail(f"the agent was OOM-killed (command's oom_score_adj: {res.get('stderr', '').strip() or '?'}; "
                    f"exec: {res.get('error') or res}); DELETE -> {d.status} in {time.time() - t:.1f}s, "
                    f"clean: {bool(clean)}")
    assert healthy(server)


@pytest.mark.parametrize("target", ["/tmp/atk-inodes", "/dev/shm/atk-inodes"])
def test_inode_exhaustion(make_sandbox, server, target):
    """Empty files until the inode table is full: bounded well below host scale (or the
    creator is OOM-killed for the inodes' memory); the sandbox recovers."""
    sb = make_sandbox(disk_mb=16, memory_mb=256)
    uid = _host_uid(sb)
    t = time.time()
    res = sb.exec(["/usr/local/bin/attack", "inode_fill", target, "1000000"], timeout_s=240)
    took = time.time() - t
    rs = pick(parse_results(res["stdout"]), "inode_fill")
    if rs:
        r = rs[0]
        assert r["ret"] < 0 and r["errno"] in ("ENOSPC", "EDQUOT", "ENOMEM"), \
            f"{r['files']} files made in {target} with no limit hit: {r}"
        assert r["files"] < 1_000_000
    else:
        assert res["exit_code"] == 137 or res.get("signal") in (9, "KILL", "SIGKILL") or res.get("error"), res
    assert took < 240
    if res.get("error") or not _eventually_usable(sb, 10):
        # say whether it is at least cleanly deletable, then fail on the lost agent
        t = time.time()
        d = server.http("DELETE", f"/v1/sandboxes/{sb.id}", timeout=90)
        clean = u.wait_until(lambda: not u.processes_with_uid(uid), timeout=20)
        pytest.fail(f"the sandbox's agent did not survive the inode flood in {target} "
                    f"(exec: {res.get('error') or res}); DELETE -> {d.status} in {time.time() - t:.1f}s, "
                    f"processes left: {not clean}")
    res = sb.exec(["/bin/rm", "-rf", target], timeout_s=240)
    assert _eventually_usable(sb)
    assert healthy(server)


# --------------------------------------------------------------------------
# output floods (#47)
# --------------------------------------------------------------------------
class _RssSampler(threading.Thread):
    def __init__(self, server):
        super().__init__(daemon=True)
        self.server = server
        self.peak = server_rss_kb(server)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, server_rss_kb(self.server))
            except OSError:
                pass
            time.sleep(0.05)


@pytest.mark.parametrize("gib,both", [(4, 0), (1, 1)])
def test_output_flood(make_sandbox, server, gib, both):
    """Gigabytes on stdout (and stderr) with max_output_bytes=64 KiB: the result is truncated
    and the daemon's RSS grows by far less than the flood."""
    sb = make_sandbox()
    nb = make_sandbox(install=False)
    cap = 65536
    rss0 = server_rss_kb(server)
    sampler = _RssSampler(server)
    sampler.start()
    try:
        eid = _start(server, sb, ["/usr/local/bin/attack", "flood", str(gib), str(both)], timeout_s=600,
                     max_output_bytes=cap)
        time.sleep(1)
        _neighbour_ok(server, nb)  # during the flood
        res = _wait(server, sb, eid, 660)
    finally:
        sampler.stop.set()
        sampler.join()
    growth_mb = (sampler.peak - rss0) / 1024
    assert res["state"] == "exited" and not res["timed_out"], res
    assert res["exit_code"] == 0, f"the flood did not run to its end: {res}"
    if not both:  # the whole flood went through the pipes (the last line is on stderr)
        assert f"flood done: {gib << 30} bytes" in res["stderr"], res["stderr"][-300:]
    assert res["stdout_truncated"] is True and len(res["stdout"].encode()) <= cap, \
        (res["stdout_truncated"], len(res["stdout"]))
    if both:
        assert res["stderr_truncated"] is True and len(res["stderr"].encode()) <= cap
    flood_mb = gib * 1024 * (2 if both else 1)
    assert growth_mb < 128, f"warren serve RSS grew by {growth_mb:.0f} MiB during a {flood_mb} MiB flood"
    assert sb.alive()
    assert healthy(server)


# --------------------------------------------------------------------------
# host API requests (#8, #48)
# --------------------------------------------------------------------------
def _raw(server, head: bytes, body: bytes = b"", timeout: float = 15) -> bytes:
    """Send a hand-made request; the server may answer and close before it has all of it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        try:
            s.sendall(head + body)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except OSError:
            pass
        return out


def test_huge_argv_env_and_bodies(make_sandbox, server):
    sb = make_sandbox(install=False)
    rss0 = server_rss_kb(server)
    big = "A" * (2 << 20)
    cases = [
        ("argv 2 MiB", {"argv": ["/bin/true", big]}),
        ("env 2 MiB", {"argv": ["/bin/true"], "env": {"X": big}}),
        ("argv 400k entries", {"argv": ["/bin/true"] + ["x"] * 400_000}),
        ("env 100k entries", {"argv": ["/bin/true"], "env": {f"K{i}": "v" for i in range(100_000)}}),
        ("cmd 2 MiB", {"cmd": "true " + big}),
        ("stdin 7 MiB", {"argv": ["/bin/true"], "stdin": "z" * (7 << 20)}),
    ]
    for name, body in cases:
        t = time.time()
        try:
            r = server.http("POST", f"/v1/sandboxes/{sb.id}/exec", body, timeout=60)
        except (ConnectionError, OSError) as e:  # the server may close early on a big body
            r = None
            err = e
        took = time.time() - t
        if r is not None:
            assert r.status in (200, 400, 413, 422), f"{name}: {r!r}"
            if r.status == 200:
                assert r.json.get("exit_code") is not None, f"{name}: {r!r}"
        assert took < 30, f"{name}: {took:.1f}s"
        assert healthy(server), f"daemon unhealthy after {name}"
    # deeply nested JSON
    deep = b"[" * 100_000 + b"]" * 100_000
    r = server.http("POST", f"/v1/sandboxes/{sb.id}/exec", deep, headers={"Content-Type": "application/json"})
    assert 400 <= r.status < 500, r
    # create with a huge env
    r = server.http("POST", "/v1/sandboxes", {"image": "t:1", "env": {"X": big}})
    assert 400 <= r.status < 500, r
    # a declared 1 TiB file upload and a 1 TiB JSON body: refused before reading
    for path in (f"/v1/sandboxes/{sb.id}/files?path=/tmp/x", f"/v1/sandboxes/{sb.id}/exec"):
        head = (f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
                f"Content-Length: {1 << 40}\r\n\r\n").encode()
        if path.endswith("/exec"):
            head = head.replace(b"PUT ", b"POST ", 1)
        t = time.time()
        out = _raw(server, head)  # refused on the declared length alone
        assert out.startswith(b"HTTP/1.1 413") or out.startswith(b"HTTP/1.1 400"), out[:200]
        assert time.time() - t < 10
    assert healthy(server)
    assert sb.alive()
    assert server_rss_kb(server) - rss0 < 256 * 1024
