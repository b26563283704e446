"""Restart safety: `kill -9` of `warren serve` loses no sandbox and no record.

Each test runs its own daemon (the session's shared one must not be killed), kills it with
SIGKILL at an awkward moment, starts it again on the same data dir and port, and checks that
sandboxes kept running and were taken over, exec results and streams are complete, trajectory
steps and leases survived, and that deleting afterwards still leaves nothing behind.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

import e2e_util as u
from conftest import Server, _build_rootfs, _free_port, _scratch_base, _warren_bin, safe_rmtree

IMG = "rs:1"


@pytest.fixture
def daemon(tmp_path):
    base = _scratch_base()
    data = tempfile.mkdtemp(prefix="warren-e2e-restart-", dir=base)
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-restart-root-", dir=base))
    srv = Server(_warren_bin(), data, _free_port(), str(tmp_path / "serve.log"), str(tmp_path / "home"))
    srv.start()
    try:
        _build_rootfs(root)
        r = srv.cli("image", "build", IMG, "--from-dir", str(root), timeout=300)
        assert r.returncode == 0, r.stderr
        yield srv
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.delete_all_sandboxes()
        srv.stop()
        # A daemon that stops leaves neither its cgroup parent nor its run directory (its
        # warm microVMs, each with a cgroup and sockets there, go first).
        parent = _parent(srv)
        left = [d for d in (f"/sys/fs/cgroup/unified/{parent}", f"/sys/fs/cgroup/{parent}",
                            f"/sys/fs/cgroup/memory/{parent}", f"/run/warren/{parent}") if os.path.isdir(d)]
        safe_rmtree(data)
        safe_rmtree(str(root))
        assert not left, f"left after the daemon stopped: {left}"


def kill9_and_restart(srv: Server, pause: float = 0.5) -> None:
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=20)
    time.sleep(pause)
    srv.start()


def _parent(srv: Server) -> str:
    return "warren-" + hashlib.sha256(os.path.realpath(srv.data_dir).encode()).hexdigest()[:8]


def cgroup_dirs(srv: Server, sid: str) -> list:
    parent = _parent(srv)
    found = []
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids",
                 "/sys/fs/cgroup/cpu"):
        p = os.path.join(root, parent, sid)
        if os.path.isdir(p):
            found.append(p)
    return found


def test_kill9_during_a_long_exec_loses_nothing(daemon):
    _kill9_during_a_long_exec(daemon, {"image": IMG})


def test_kill9_microvm_is_taken_over(daemon):
    """A microVM's QEMU keeps running while no daemon is there; the next one adopts it (same
    QEMU, no reboot), resyncs the agent's stream and gets every byte of a running exec."""
    spec = {"image": IMG, "backend": "microvm", "memory_mb": 256}
    qemu = _kill9_during_a_long_exec(daemon, spec, check_qemu=True)
    assert qemu["before"] == qemu["after"], qemu


def test_kill9_vm_is_taken_over(daemon):
    """backend vm: the agent is a service of the guest's systemd, with its own relay and
    listening socket; a restarted daemon adopts the VM through them just the same."""
    r = daemon.cli("image", "build", "sysd:1", "--debian", "bookworm", "--packages", "systemd-sysv", timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    spec = {"image": "sysd:1", "backend": "vm", "memory_mb": 256}
    qemu = _kill9_during_a_long_exec(daemon, spec, check_qemu=True)
    assert qemu["before"] == qemu["after"], qemu


def _qemu_of(srv, sid):
    parent = "warren-" + hashlib.sha256(os.path.realpath(srv.data_dir).encode()).hexdigest()[:8]
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        p = os.path.join(root, parent, sid, "cgroup.procs")
        if os.path.exists(p):
            with open(p) as f:
                pids = f.read().split()
            return [(pid, open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19]) for pid in pids]
    return None


def _kill9_during_a_long_exec(srv, spec, check_qemu=False):
    r = srv.http("POST", "/v1/sandboxes", spec)
    assert r.status == 201, r
    sid = r.json["id"]
    qemu = {"before": _qemu_of(srv, sid) if check_qemu else None}
    done = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo state > /root/f; echo finished"})
    assert done.status == 200 and done.json["stdout"] == "finished\n", done
    # A long exec with steady output: the daemon dies in the middle of it.
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec",
                 {"cmd": "i=1; while [ $i -le 12 ]; do echo line $i; i=$((i+1)); sleep 0.25; done; echo err >&2; exit 3",
                  "wait": False})
    assert r.status == 202, r
    long_id = r.json["exec_id"]
    time.sleep(1.1)
    kill9_and_restart(srv)
    if check_qemu:
        qemu["after"] = _qemu_of(srv, sid)

    sb = srv.http("GET", f"/v1/sandboxes/{sid}")
    assert sb.status == 200 and sb.json["state"] == "running", sb
    # The stream, from the start, is complete and ends with the result.
    stream = srv.http("GET", f"/v1/sandboxes/{sid}/execs/{long_id}/stream?after=0", timeout=60)
    assert stream.status == 200, stream
    lines = u.ndjson_lines(stream.body)
    out = "".join(l.get("data", "") for l in lines if l.get("stream") == "stdout")
    assert out == "".join(f"line {i}\n" for i in range(1, 13)), out
    seqs = [l["seq"] for l in lines]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    result = lines[-1]["result"]
    assert result["exit_code"] == 3 and result["stderr"] == "err\n", result
    # The exec that finished before the kill is intact.
    again = srv.http("GET", f"/v1/sandboxes/{sid}/execs/{done.json['exec_id']}")
    assert again.status == 200 and again.json["stdout"] == "finished\n" and again.json["exit_code"] == 0, again
    # The sandbox kept its state and takes new execs.
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["cat", "/root/f"]})
    assert r.status == 200 and r.json["stdout"] == "state\n", r
    # One journal file holds the sandbox's exec records (not files per exec).
    journal = os.path.join(srv.data_dir, "execs", sid + ".journal")
    assert os.listdir(os.path.join(srv.data_dir, "execs")) == [sid + ".journal"]
    # Deleting it after the takeover still leaves nothing.
    assert srv.http("DELETE", f"/v1/sandboxes/{sid}").status == 204
    assert cgroup_dirs(srv, sid) == []
    assert not os.path.exists(journal) and os.listdir(os.path.join(srv.data_dir, "execs")) == []
    return qemu


def test_output_written_while_the_daemon_is_down_arrives(daemon):
    """Commands keep running while no daemon listens; what they print waits and arrives."""
    srv = daemon
    sid = srv.http("POST", "/v1/sandboxes", {"image": IMG}).json["id"]
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec",
                 {"cmd": "sleep 0.5; seq 1 20000; echo tail", "wait": False})
    long_id = r.json["exec_id"]
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=20)
    time.sleep(2)   # the command runs (and blocks on its full pipe) meanwhile
    srv.start()
    res = u.wait_until(lambda: (lambda x: x if x.get("state") == "exited" else None)(
        srv.http("GET", f"/v1/sandboxes/{sid}/execs/{long_id}").json), timeout=30)
    assert res and res["exit_code"] == 0, res
    assert res["stdout"] == "".join(f"{i}\n" for i in range(1, 20001)) + "tail\n"


def test_a_terminal_session_survives(daemon):
    """A shell on a terminal goes on through the daemon's death: what it printed meanwhile
    arrives, and it still takes input and a new size afterwards."""
    srv = daemon
    sid = srv.http("POST", "/v1/sandboxes", {"image": IMG}).json["id"]
    eid = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh"], "tty": True}).json["exec_id"]
    base = f"/v1/sandboxes/{sid}/execs/{eid}"

    def screen():
        return base64.b64decode(srv.http("GET", base).json["stdout_b64"])

    assert srv.http("POST", base + "/input", {"data": "sleep 1; echo while-down\n"}).status == 204
    kill9_and_restart(srv, pause=2)
    assert u.wait_until(lambda: b"while-down" in screen(), timeout=30), screen()
    assert srv.http("POST", base + "/resize", {"rows": 44, "cols": 88}).status == 204
    assert srv.http("POST", base + "/input", {"data": "stty size; exit 6\n"}).status == 204
    res = u.wait_until(lambda: (lambda x: x if x.get("state") == "exited" else None)(
        srv.http("GET", base).json), timeout=30)
    assert res and res["exit_code"] == 6, res
    assert b"44 88" in base64.b64decode(res["stdout_b64"]), res


def test_paused_sandbox_stays_paused_and_resumes(daemon):
    srv = daemon
    sid = srv.http("POST", "/v1/sandboxes", {"image": IMG}).json["id"]
    assert srv.http("POST", f"/v1/sandboxes/{sid}/pause").json["state"] == "paused"
    kill9_and_restart(srv)
    assert srv.http("GET", f"/v1/sandboxes/{sid}").json["state"] == "paused"
    assert srv.http("POST", f"/v1/sandboxes/{sid}/resume").json["state"] == "running"
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["echo", "awake"]})
    assert r.status == 200 and r.json["stdout"] == "awake\n", r


def test_filesystem_policy_and_changes_survive(daemon):
    """The read-only trees stay read-only across a kill -9 (the flags are the kernel's), and
    the restarted daemon reports changes and changes the policy again."""
    srv = daemon
    sid = srv.http("POST", "/v1/sandboxes", {"image": IMG, "filesystem": {"read_only": ["/etc"]}}).json["id"]
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo new > /root/new"})
    assert r.json["exit_code"] == 0, r
    kill9_and_restart(srv)
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo x > /etc/marker"})
    assert r.json["exit_code"] != 0 and "Operation not permitted" in r.json["stderr"], r
    r = srv.http("GET", f"/v1/sandboxes/{sid}/changes")
    assert r.status == 200 and [c["path"] for c in r.json["changes"]] == ["/root/new"], r
    r = srv.http("PUT", f"/v1/sandboxes/{sid}/filesystem", {})
    assert r.status == 200 and r.json["filesystem"] == {"read_only": [], "writable": []}, r
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo x > /etc/marker"})
    assert r.json["exit_code"] == 0, r


def test_fncall_exec_records_survive(daemon, server, runner):
    """A fncall sandbox is only a record between execs, but its execs' results are kept like
    any sandbox's: a kill -9 loses neither the result nor the stream of a finished exec."""
    srv = daemon
    # The session's runner image, moved over as the EROFS layer it is (no second mmdebstrap).
    digest = {l["ref"]: l for l in server.http("GET", "/v1/layers").json["layers"]}[runner]["digest"]
    with open(os.path.join(server.data_dir, "blobs", "sha256", digest.split(":", 1)[1]), "rb") as f:
        r = srv.http("POST", "/v1/layers?name=rs-runner&tag=1&kind=base", f.read(),
                     headers={"Content-Type": "application/octet-stream"}, timeout=300)
    assert r.status == 201, r
    sid = srv.http("POST", "/v1/sandboxes", {"image": "rs-runner:1", "backend": "fncall"}).json["id"]
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", "echo before; echo oops >&2; exit 3"]},
                 timeout=180)
    assert r.status == 200 and r.json["exit_code"] == 3 and r.json["stdout"] == "before\n", r
    eid = r.json["exec_id"]
    kill9_and_restart(srv)
    r = srv.http("GET", f"/v1/sandboxes/{sid}/execs/{eid}")
    assert r.status == 200, r
    assert (r.json["state"], r.json["exit_code"], r.json["stdout"], r.json["stderr"]) == ("exited", 3, "before\n", "oops\n")
    lines = u.ndjson_lines(srv.http("GET", f"/v1/sandboxes/{sid}/execs/{eid}/stream?after=0").body)
    assert [l.get("data") for l in lines if l.get("data")] == ["before\n", "oops\n"], lines
    r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["echo", "after"]}, timeout=180)
    assert r.status == 200 and r.json["stdout"] == "after\n", r


def test_trajectory_steps_and_leases_survive(daemon):
    srv = daemon
    lease = srv.http("POST", "/v1/leases", {"ttl_s": 120}).json["id"]
    sb = srv.http("POST", "/v1/sandboxes", {"image": IMG, "trajectory": "rs-traj", "lease": lease}).json
    for i in range(3):
        r = srv.http("POST", f"/v1/sandboxes/{sb['id']}/exec", {"cmd": "echo x >> /root/log; wc -l < /root/log"})
        assert r.status == 200 and r.json["stdout"].strip() == str(i + 1), r
    kill9_and_restart(srv)
    # The trainer comes back: same sandbox, recorded steps replay, the next one runs.
    again = srv.http("POST", "/v1/sandboxes", {"image": IMG, "trajectory": "rs-traj", "lease": lease})
    assert again.status == 201 and again.json["id"] == sb["id"], again
    for i in range(3):
        r = srv.http("POST", f"/v1/sandboxes/{sb['id']}/exec",
                     {"cmd": "echo x >> /root/log; wc -l < /root/log", "step": i})
        assert r.status == 200 and r.json["replayed"] is True and r.json["stdout"].strip() == str(i + 1), r
    r = srv.http("POST", f"/v1/sandboxes/{sb['id']}/exec", {"cmd": "echo x >> /root/log; wc -l < /root/log", "step": 3})
    assert r.status == 200 and r.json["replayed"] is False and r.json["stdout"].strip() == "4", r
    assert len(srv.http("GET", "/v1/trajectories/rs-traj").json["steps"]) == 4
    # The lease is still there, renewable; releasing it deletes the sandbox.
    assert srv.http("POST", f"/v1/leases/{lease}/renew").status == 200
    assert srv.http("DELETE", f"/v1/leases/{lease}").status == 204
    u.assert_error(srv.http("GET", f"/v1/sandboxes/{sb['id']}"), 404, "not_found")


def test_a_sandbox_that_died_while_the_daemon_was_down_is_failed(daemon):
    srv = daemon
    live = srv.http("POST", "/v1/sandboxes", {"image": IMG}).json["id"]
    dead = srv.http("POST", "/v1/sandboxes", {"image": IMG}).json["id"]
    dead_pid = None
    parent = "warren-" + hashlib.sha256(os.path.realpath(srv.data_dir).encode()).hexdigest()[:8]
    with open(f"/run/warren/{parent}/{dead}.json") as f:
        dead_pid = json.load(f)["pid"]
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=20)
    os.kill(dead_pid, signal.SIGKILL)   # its init dies while nobody watches
    time.sleep(0.5)
    srv.start()
    assert srv.http("GET", f"/v1/sandboxes/{live}").json["state"] == "running"
    doc = srv.http("GET", f"/v1/sandboxes/{dead}").json
    assert doc["state"] == "failed" and "restarted" in doc["error"]["message"], doc
    assert cgroup_dirs(srv, dead) == []
    # ... and nothing of it is left in the run directories (sockets, network record).
    left = [os.path.join(d, n) for d in (f"/run/warren/{parent}", f"/run/warren/{parent}-net")
            if os.path.isdir(d) for n in os.listdir(d) if n.startswith(dead)]
    assert left == [], left
    assert srv.http("DELETE", f"/v1/sandboxes/{dead}").status == 204


def test_two_restarts_in_a_row(daemon):
    srv = daemon
    sid = srv.http("POST", "/v1/sandboxes", {"image": IMG}).json["id"]
    for n in range(2):
        kill9_and_restart(srv, pause=0.2)
        r = srv.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["echo", str(n)]})
        assert r.status == 200 and r.json["stdout"] == f"{n}\n", r


def test_a_delete_cut_short_by_the_crash_is_finished(daemon):
    """A record left `stopping` (the daemon died mid-delete) is deleted by the next daemon."""
    import sqlite3
    srv = daemon
    sid = srv.http("POST", "/v1/sandboxes", {"image": IMG}).json["id"]
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=20)
    con = sqlite3.connect(os.path.join(srv.data_dir, "state.db"))
    try:
        doc = json.loads(con.execute("SELECT doc FROM sandboxes WHERE id = ?", (sid,)).fetchone()[0])
        doc["state"] = "stopping"
        con.execute("UPDATE sandboxes SET state = 'stopping', doc = ? WHERE id = ?", (json.dumps(doc), sid))
        con.commit()
    finally:
        con.close()
    srv.start()
    u.assert_error(srv.http("GET", f"/v1/sandboxes/{sid}"), 404, "not_found")
    assert cgroup_dirs(srv, sid) == []
