"""Density (issue 27): a node with a small memory budget holds more idle Python sandboxes than
fit without reclaim; idle ones give memory back to a swap device, hibernated ones are frozen
and paged out and wake on their next operation; a busy one is never reclaimed; the node
admits requests beyond its budget only up to its overcommit ratio.

The module restarts the session's server with a 1 GiB budget and short idle timers (and
puts it back as it was after): the behaviour under test is the node's, on the real kernel
(cgroup v1 memory limits, the v2 freezer, zram, process_madvise)."""

from __future__ import annotations

import concurrent.futures as cf
import time

import pytest

import e2e_util as u

pytestmark = pytest.mark.serve_only("restarts warren serve's one node with a small memory budget")

BUDGET_MB = 1024
OVERCOMMIT = 5
# An idle agent: Python that imported a few modules and holds ~48 MiB of objects it does not
# touch, and a socket that answers the checksum of them (its state, checked after a wake).
AGENT = r"""
import hashlib, json, os, socket, sys, zlib
blobs = [("record-%d " % i) * 40 + os.urandom(64).hex() for i in range(80000)]
def digest():
    h = hashlib.sha256()
    for b in blobs:
        h.update(b.encode())
    return h.hexdigest()
s = socket.socket(socket.AF_UNIX)
s.bind("/tmp/agent.sock"); s.listen(4)
open("/tmp/agent.ready", "w").write(digest())
while True:
    c, _ = s.accept()
    c.sendall(digest().encode()); c.close()
"""
ASK = ("import socket; s=socket.socket(socket.AF_UNIX); s.connect('/tmp/agent.sock'); "
       "print(s.recv(100).decode())")


@pytest.fixture(scope="module")
def dense(server, runner):
    """The session's server, restarted as a node with a 1 GiB budget, idle after 1 s and
    hibernated after 4 s."""
    saved = list(server.extra_args)
    server.stop()
    server.extra_args = saved + ["--memory-budget", f"{BUDGET_MB}M", "--memory-overcommit", str(OVERCOMMIT),
                                 "--idle-after", "1", "--hibernate-after", "4", "--swap", "zram:2G"]
    server.start()
    try:
        yield server
    finally:
        server.delete_all_sandboxes()
        swap = _node(server)["density"]["swap"]
        server.stop()
        with open("/proc/swaps") as f:
            swaps = f.read()
        server.extra_args = saved
        server.start()
    # A clean stop with nothing left in it turns the node's own swap off and removes it.
    assert swap["device"].startswith("/dev/zram"), swap
    assert swap["device"] + " " not in swaps, f"{swap['device']} is still swap after the node stopped"


def _node(server) -> dict:
    return server.http("GET", "/v1/nodes").json["nodes"][0]


def _density(server, sid: str) -> dict:
    r = server.http("GET", "/v1/sandboxes/" + sid)
    assert r.status == 200, r
    return r.json["density"]


def _oom_kills(server) -> int:
    parent = _node(server)["cgroup_parent"]
    with open(f"/sys/fs/cgroup/memory/{parent}/memory.oom_control") as f:
        for line in f:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return 0


def _wait(pred, what: str, timeout: float = 60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _start_agent(server, sid: str) -> str:
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec",
                    {"argv": ["python3", "-c", AGENT], "timeout_s": 3600, "wait": False})
    assert r.status == 202, r

    def ready():
        x = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["cat", "/tmp/agent.ready"]})
        return x.json["stdout"] if x.status == 200 and x.json["exit_code"] == 0 else None
    return _wait(ready, f"the agent in {sid} to be ready", timeout=120)


def _ask(server, sid: str) -> str:
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["python3", "-c", ASK]}, timeout=60)
    assert r.status == 200 and r.json["exit_code"] == 0, r
    return r.json["stdout"].strip()


def test_more_idle_python_sandboxes_than_the_budget_holds_all_stay_alive(dense, runner, sandboxes):
    kills = _oom_kills(dense)
    count = 24  # ~60 MiB each in RAM when busy: ~1.4 GiB against a 1 GiB budget
    ids = []
    for _ in range(count):
        r = dense.http("POST", "/v1/sandboxes", {"image": runner, "memory_mb": 160, "cpu": 0.5})
        assert r.status == 201, r
        ids.append(r.json["id"])
        sandboxes.append(r.json["id"])
    with cf.ThreadPoolExecutor(4) as pool:
        digests = dict(zip(ids, pool.map(lambda s: _start_agent(dense, s), ids)))
    # Every one goes quiet and is hibernated; the node's memory stays within its budget.
    _wait(lambda: all(_density(dense, s)["activity"] == "hibernated" for s in ids), "hibernation", 120)
    node = _node(dense)["density"]
    assert node["used_bytes"] <= BUDGET_MB << 20, node
    assert node["swap"]["used_bytes"] > 0 and node["reclaimed_bytes"] > 0, node
    held = sum(_density(dense, s)["swapped_bytes"] for s in ids)
    assert held > count * (16 << 20), held  # their untouched objects went to swap
    # Each answers with its state intact, woken transparently (no error, just a slower call).
    for sid in ids:
        assert _ask(dense, sid) == digests[sid], sid
        d = _density(dense, sid)
        assert d["wakes"] >= 1 and d["activity"] == "active", d
    assert _oom_kills(dense) == kills
    n = _node(dense)["density"]
    assert n["wakes"] >= count and n["wake_p99_ms"] > 0, n


def test_a_busy_sandbox_is_never_reclaimed_among_idle_ones(dense, runner, sandboxes):
    idle = []
    for _ in range(3):
        r = dense.http("POST", "/v1/sandboxes", {"image": runner, "memory_mb": 160})
        assert r.status == 201, r
        idle.append(r.json["id"])
        sandboxes.append(r.json["id"])
        _start_agent(dense, r.json["id"])
    r = dense.http("POST", "/v1/sandboxes", {"image": runner, "memory_mb": 256})
    busy = r.json["id"]
    sandboxes.append(busy)
    # Busy: it computes over 64 MiB of its own the whole time.
    spin = ("import time\nb = bytearray(64 << 20)\nend = time.time() + 12\n"
            "while time.time() < end:\n    for i in range(0, len(b), 4096): b[i] = (b[i] + 1) % 256\n")
    x = dense.http("POST", f"/v1/sandboxes/{busy}/exec", {"argv": ["python3", "-c", spin], "timeout_s": 60,
                                                          "wait": False})
    assert x.status == 202, x
    exec_id = x.json["exec_id"]
    _wait(lambda: all(_density(dense, s)["activity"] == "hibernated" for s in idle), "the idle to hibernate")
    d = _density(dense, busy)
    assert d["activity"] == "active" and d["swapped_bytes"] == 0 and d["reclaimed_bytes"] == 0, d
    done = _wait(lambda: (lambda j: j if j["state"] == "exited" else None)(
        dense.http("GET", f"/v1/sandboxes/{busy}/execs/{exec_id}").json), "the busy command", 90)
    assert done["exit_code"] == 0, done


def test_a_hibernated_sandbox_that_allocates_is_woken_and_served(dense, runner, sandboxes):
    r = dense.http("POST", "/v1/sandboxes", {"image": runner, "memory_mb": 256})
    sid = r.json["id"]
    sandboxes.append(sid)
    other = dense.http("POST", "/v1/sandboxes", {"image": runner, "memory_mb": 160}).json["id"]
    sandboxes.append(other)
    digest = _start_agent(dense, other)
    _wait(lambda: _density(dense, sid)["activity"] == "hibernated", "hibernation")
    grow = "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); print(len(b) >> 20)"
    x = dense.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["python3", "-c", grow]}, timeout=120)
    assert x.status == 200 and x.json["exit_code"] == 0 and x.json["stdout"] == "200\n", x
    # Beyond its own limit: its own command dies, nothing else.
    x = dense.http("POST", f"/v1/sandboxes/{sid}/exec",
                   {"argv": ["python3", "-c", "b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096])"]},
                   timeout=120)
    assert x.status == 200 and x.json["exit_code"] != 0, x
    assert _ask(dense, other) == digest
    assert dense.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}).json["exit_code"] == 0


def test_requests_beyond_budget_times_overcommit_are_refused(dense, image, sandboxes):
    committed = _node(dense)["density"]["committed_memory_bytes"] >> 20
    room = BUDGET_MB * OVERCOMMIT - committed
    r = dense.http("POST", "/v1/sandboxes", {"image": image, "memory_mb": room + 1})
    err = u.assert_error(r, 429, "quota")
    assert "memory is committed" in err["message"], err
    # Requests add up past the budget itself: overcommitted, each with the limit it asked for.
    for mb in (BUDGET_MB, BUDGET_MB // 2):
        a = dense.http("POST", "/v1/sandboxes", {"image": image, "memory_mb": mb})
        assert a.status == 201, a
        sandboxes.append(a.json["id"])
        assert _density(dense, a.json["id"])["limit_bytes"] >= mb << 20
    assert _node(dense)["density"]["committed_memory_bytes"] > BUDGET_MB << 20


def test_density_is_observable_in_metrics_and_inspect(dense, image, sandboxes):
    r = dense.http("POST", "/v1/sandboxes", {"image": image})
    sid = r.json["id"]
    sandboxes.append(sid)
    _wait(lambda: _density(dense, sid)["activity"] == "hibernated", "hibernation")
    text = dense.http("GET", "/metrics").body.decode()
    for family in ("warren_node_memory_budget_bytes", "warren_node_reclaimed_bytes_total",
                   "warren_node_swap_used_bytes", "warren_sandboxes_by_activity{activity=\"hibernated\"}",
                   "warren_sandbox_wakes_total"):
        assert family in text, family
    out = dense.cli("inspect", sid)
    assert out.returncode == 0, out.stderr
    assert "hibernated" in out.stdout and "swapped_bytes" in out.stdout, out.stdout


def test_an_idle_microvm_is_paused_paged_out_and_woken_by_its_next_exec(dense, image, sandboxes):
    """A microVM quiet for longer is paused (its QEMU frozen) and its guest memory paged out of
    QEMU into the node's swap; its next exec wakes it and finds its file and its process."""
    spec = dict(image=image, backend="microvm", memory_mb=256, cpu=2, disk_mb=64, pids=64)
    r = dense.http("POST", "/v1/sandboxes", spec, timeout=300)
    assert r.status == 201, r
    sid = r.json["id"]
    sandboxes.append(sid)
    start = "echo kept > /tmp/state; sh -c 'echo $$ > /tmp/pid; exec sleep 3600' >/dev/null 2>&1 &"
    x = dense.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", start]}, timeout=120)
    assert x.status == 200 and x.json["exit_code"] == 0, x
    seen = []

    def hibernated():
        seen.append(_density(dense, sid))
        return seen[-1] if seen[-1]["activity"] == "hibernated" else None
    try:
        d = _wait(hibernated, "the microVM to hibernate", timeout=120)
    except AssertionError:
        raise AssertionError(f"not hibernated; last seen: {seen[-8:]}") from None
    assert d["swapped_bytes"] > 0, d  # QEMU's copy of guest memory went to swap
    x = dense.http("POST", f"/v1/sandboxes/{sid}/exec",
                   {"argv": ["sh", "-c", "cat /tmp/state && kill -0 $(cat /tmp/pid) && echo alive"]}, timeout=120)
    assert x.status == 200 and x.json["exit_code"] == 0 and x.json["stdout"].split() == ["kept", "alive"], x
    after = _density(dense, sid)
    assert after["wakes"] >= 1 and after["max_wake_ms"] > 0, after


def test_a_quiet_command_someone_waits_on_ends_and_its_sandbox_is_not_frozen_under_it(dense, image, sandboxes):
    """A blocking exec of a command that sleeps past --hibernate-after: the sandbox may go idle
    but is not frozen while the call waits (a frozen command's timers do not fire: the call
    would never return); once the command ended, it hibernates as usual."""
    sid = dense.http("POST", "/v1/sandboxes", {"image": image}).json["id"]
    sandboxes.append(sid)
    t0 = time.monotonic()
    x = dense.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sleep", "7"], "timeout_s": 60}, timeout=60)
    took = time.monotonic() - t0
    assert x.status == 200 and x.json["exit_code"] == 0 and not x.json["timed_out"], x
    assert took < 30, f"the exec took {took:.1f} s"
    _wait(lambda: _density(dense, sid)["activity"] == "hibernated", "hibernation after the command ended")
