"""The microvm backend end to end: the checks the container backend passes, with
`backend: microvm` (a QEMU `-M microvm` guest per sandbox, warren-agent as its init).

Every sandbox here has the same size (memory 256M and 2 vCPUs, or cpu 1.5 which rounds up to
the same 2 vCPUs), so the node boots one template VM (a few seconds, once per cache) and
every sandbox after it is restored from that template in about half a second. Two sandboxes
are shared by the module; the tests that need a fresh one (`warren run`, delete) make it.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time

import pytest

import warren
import e2e_util as u

MEMORY_MB, CPU, DISK_MB, PIDS = 256, 2, 64, 64
SPEC = dict(backend="microvm", memory_mb=MEMORY_MB, cpu=CPU, disk_mb=DISK_MB, pids=PIDS)
# The same size through the CLI; cpu 1.5 rounds up to the same two vCPUs (same template).
CLI_SPEC = ("--backend", "microvm", "--memory", f"{MEMORY_MB}M", "--cpu", "1.5",
            "--disk", f"{DISK_MB}M", "--pids", str(PIDS))
ERROR_LINE = re.compile(r"^warren: .+: .+$")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def _node(server) -> dict:
    r = server.http("GET", "/v1/nodes")
    assert r.status == 200, r
    nodes = [n for n in r.json["nodes"] if "microvm" in n.get("backends", [])]
    assert nodes, f"no node offers the microvm backend: {r.json}"
    return nodes[0]


def _cgroup_dirs(server, sid: str) -> list:
    """The host cgroup directories named after the sandbox under the node's cgroup parent
    (v1 memory/cpu/pids and the v2 hierarchy), those that exist."""
    parent = _node(server)["cgroup_parent"]
    cands = [f"/sys/fs/cgroup/{h}/{parent}/{sid}" for h in ("unified", "memory", "cpu", "pids")]
    cands.append(f"/sys/fs/cgroup/{parent}/{sid}")  # a cgroup2-only host
    return [d for d in cands if os.path.isdir(d)]


def _v2_dir(server, sid: str) -> str:
    parent = _node(server)["cgroup_parent"]
    for d in (f"/sys/fs/cgroup/unified/{parent}/{sid}", f"/sys/fs/cgroup/{parent}/{sid}"):
        if os.path.isfile(d + "/cgroup.procs"):
            return d
    raise AssertionError(f"no cgroup2 directory for {sid} under {parent}: {u.cgroup_dirs_named(sid)}")


def _procs(cg_dir: str) -> list:
    with open(cg_dir + "/cgroup.procs") as f:
        return [int(x) for x in f.read().split()]


def _qemu_pid(server, sid: str) -> int:
    """The host pid of the sandbox's QEMU: the one process in its cgroup."""
    pids = _procs(_v2_dir(server, sid))
    qemu = [p for p in pids if u.cmdline(p) and "qemu-system" in os.path.basename(u.cmdline(p)[0])]
    assert len(qemu) == 1 and pids == qemu, \
        f"the cgroup of {sid} should hold exactly its QEMU: {[(p, u.cmdline(p)[:3]) for p in pids]}"
    return qemu[0]


def _start_time(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _cli_create(server, image, sandboxes) -> str:
    r = server.cli("create", "--image", image, *CLI_SPEC)
    assert r.returncode == 0, f"warren create --backend microvm failed ({r.returncode}): {r.stderr}"
    sid = r.stdout.strip()
    assert sid and "\n" not in sid and " " not in sid, f"warren create printed {r.stdout!r}"
    sandboxes.append(sid)
    return sid


def _killed(r) -> bool:
    return r.exit_code == 137 or r.signal in (9, "KILL", "SIGKILL")


def _answers(sb, within: float) -> bool:
    """Within `within` seconds the sandbox runs a command that needs a fork (a pipe)."""
    deadline = time.time() + within
    while True:
        try:
            r = sb.run("echo still-here | cat", timeout=20)
            if r.exit_code == 0 and r.stdout == "still-here\n":
                return True
        except warren.WarrenError:
            pass
        if time.time() > deadline:
            return False
        time.sleep(1)


# --------------------------------------------------------------------------
# fixtures: two microVMs shared by the module
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vm(server, image):
    """A microVM made through the SDK (memory 256M, cpu 2, disk 64M, pids 64)."""
    c = server.client()
    sb = c.create(image=image, env={"FROM_SPEC": "spec"}, **SPEC)
    try:
        assert sb.backend == "microvm" and sb.state == "running", sb
        yield sb
    finally:
        server.http("DELETE", "/v1/sandboxes/" + sb.id, timeout=60)
        c.close()


@pytest.fixture(scope="module")
def vm2(server, image, vm):
    """A second microVM of the same size, made through the CLI with cpu 1.5; its id."""
    sid = _cli_create(server, image, [])
    try:
        yield sid
    finally:
        server.http("DELETE", "/v1/sandboxes/" + sid, timeout=60)


# --------------------------------------------------------------------------
# node
# --------------------------------------------------------------------------
def test_nodes_report_microvm(server, vm):
    node = _node(server)
    assert "microvm" in node["backends"], node
    m = node["microvm"]
    assert isinstance(m, dict) and "error" not in m, f"microvm backend not up: {m}"
    assert m["accel"] in ("kvm", "tcg"), m
    assert isinstance(m["accel_probe"], str), m
    assert isinstance(m["guest_kernel"], str) and m["guest_kernel"], m
    assert isinstance(m["snapshots"], bool), m
    for k in ("restores", "cold_boots"):
        assert isinstance(m[k], int) and m[k] >= 0, m
    assert m["restores"] + m["cold_boots"] >= 1, f"a microVM is running but none was started: {m}"


def test_sandbox_record(server, vm):
    r = server.http("GET", f"/v1/sandboxes/{vm.id}")
    assert r.status == 200, r
    doc = r.json
    assert doc["backend"] == "microvm" and doc["state"] == "running", doc
    assert (doc["memory_mb"], doc["cpu"], doc["disk_mb"], doc["pids"]) == (MEMORY_MB, CPU, DISK_MB, PIDS), doc
    assert doc["network"]["mode"] == "none", doc
    listed = server.http("GET", "/v1/sandboxes").json["sandboxes"]
    assert vm.id in [s["id"] for s in listed]


def test_qemu_is_jailed(server, vm):
    """QEMU runs as an unprivileged uid, in the sandbox's cgroup, in namespaces of its own."""
    pid = _qemu_pid(server, vm.id)
    ids = u.uids(pid)
    assert ids is not None and 0 not in ids, f"QEMU {pid} runs with host uid(s) {ids}"
    for kind in ("mnt", "pid", "ipc", "uts", "net"):
        assert u.ns(pid, kind) not in (None, u.ns("self", kind)), f"QEMU shares our {kind} namespace"
    parent = _node(server)["cgroup_parent"]
    mine = {d for d in u.cgroup_dirs_of(pid) if d.endswith(f"/{parent}/{vm.id}")}
    want = set(_cgroup_dirs(server, vm.id))
    assert want and _v2_dir(server, vm.id) in want and want <= mine, \
        f"QEMU {pid} is not in the sandbox's cgroups {sorted(want)}: {u.cgroup_dirs_of(pid)}"


# --------------------------------------------------------------------------
# exec
# --------------------------------------------------------------------------
def test_exec_stdout_stderr_exit_code(vm):
    r = vm.run("echo out; echo err >&2; exit 5")
    assert (r.exit_code, r.stdout, r.stderr) == (5, "out\n", "err\n"), r
    assert r.signal is None and r.timed_out is False, r
    r = vm.run(["sh", "-c", "echo $0 $1", "a b", "c"])
    assert r.exit_code == 0 and r.stdout == "a b c\n", r
    r = vm.run(["echo", "$HOME", "*"])
    assert r.stdout == "$HOME *\n", r
    r = vm.run("seq 1 2000")
    assert r.exit_code == 0 and r.stdout == "".join(f"{i}\n" for i in range(1, 2001))
    r = vm.run(["sh", "-c", "printf '\\377\\000A'"], binary=True)
    assert r.stdout_bytes == b"\xff\x00A", r


def test_exec_env_cwd_stdin(vm):
    r = vm.run("pwd; echo $FROM_SPEC $FROM_EXEC; cat", stdin="in put\n", env={"FROM_EXEC": "e"}, cwd="/tmp")
    assert r.exit_code == 0 and r.stdout == "/tmp\nspec e\nin put\n", r
    r = vm.run(["wc", "-c"], stdin=bytes(range(256)))
    assert r.exit_code == 0 and r.stdout.strip() == "256", r


def test_exec_timeout(vm):
    t0 = time.time()
    r = vm.run("sleep 30", timeout=1)
    assert r.timed_out is True and r.exit_code == 124, r
    assert time.time() - t0 < 20
    assert vm.run("echo after").stdout == "after\n"


def test_cli_exec(server, vm):
    r = server.cli("exec", vm.id, "--cwd", "/tmp", "--env", "FOO=bar baz", "--",
                   "sh", "-c", "pwd; echo $FOO; echo oops >&2; exit 3")
    assert r.returncode == 3 and r.stdout == "/tmp\nbar baz\n" and r.stderr == "oops\n", r
    r = server.cli("exec", vm.id, "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == 128 + 15, r
    r = server.cli("exec", vm.id, "-i", "--", "cat", input="through stdin\n")
    assert r.returncode == 0 and r.stdout == "through stdin\n", r


def test_pty_in_the_guest(vm):
    """A terminal of the guest's own devpts: its size, a resize, ^C, the exit code."""
    with vm.pty("sh", rows=21, cols=71) as term:
        term.write("stty size; tty\n")
        term.read_until("21 71")
        assert b"/dev/pts/" in term.read_until("# ", timeout=30)
        term.resize(42, 99)
        term.write("stty size\n")
        term.read_until("42 99", timeout=30)
        term.write("sleep 60\n")
        time.sleep(0.5)
        term.write("\x03")
        term.write("echo rc=$?\n")
        term.read_until("rc=130", timeout=30)
        term.write("exit 3\n")
        assert term.wait(timeout=60).exit_code == 3


def test_cli_run(server, image):
    before = {s["id"] for s in server.http("GET", "/v1/sandboxes").json["sandboxes"]}
    r = server.cli("run", "--image", image, *CLI_SPEC, "--", "sh", "-c", "cat /etc/marker; echo err >&2; exit 3")
    assert r.returncode == 3, r
    assert r.stdout == "warren-e2e-rootfs\n" and r.stderr == "err\n", r
    after = {s["id"] for s in server.http("GET", "/v1/sandboxes").json["sandboxes"]}
    assert after <= before, f"warren run left sandboxes behind: {after - before}"


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------
def test_sdk_files(vm):
    blob = bytes(range(256)) * 1000
    vm.write_file("/root/blob.bin", blob)
    assert vm.read_file("/root/blob.bin") == blob
    r = vm.run("wc -c < /root/blob.bin; md5sum /root/blob.bin")
    assert r.stdout.split()[0] == str(len(blob)), r
    assert r.stdout.split()[1] == hashlib.md5(blob).hexdigest(), r
    vm.write_file("/tmp/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    r = vm.run("stat -c %a /tmp/run.sh; /tmp/run.sh")
    assert r.stdout == "755\nran\n", r
    vm.write_file("/tmp/empty", b"")
    assert vm.read_file("/tmp/empty") == b""
    vm.write_file("/tmp/u.txt", "héllo ✓")
    assert vm.read_file("/tmp/u.txt").decode() == "héllo ✓"
    assert vm.read_file("/etc/marker") == b"warren-e2e-rootfs\n"
    with pytest.raises(warren.NotFound) as ei:
        vm.read_file("/tmp/does-not-exist")
    assert ei.value.code == "not_found" and ei.value.status == 404


def test_cli_cp_both_directions(server, vm, tmp_path):
    payload = os.urandom(200_000) + b"\n\x00tail"
    src = tmp_path / "in.bin"
    src.write_bytes(payload)
    r = server.cli("cp", str(src), f"{vm.id}:/tmp/in.bin")
    assert r.returncode == 0, r
    r = server.cli("exec", vm.id, "--", "wc", "-c", "/tmp/in.bin")
    assert r.returncode == 0 and r.stdout.split()[0] == str(len(payload)), r
    r = server.cli("exec", vm.id, "--", "cp", "/tmp/in.bin", "/root/out.bin")
    assert r.returncode == 0, r
    dst = tmp_path / "out.bin"
    r = server.cli("cp", f"{vm.id}:/root/out.bin", str(dst))
    assert r.returncode == 0, r
    assert dst.read_bytes() == payload
    r = server.cli("cp", f"{vm.id}:/tmp/nope", str(tmp_path / "nope"))
    assert r.returncode != 0 and ERROR_LINE.match(r.stderr.strip().splitlines()[0]), r


# --------------------------------------------------------------------------
# image and isolation between sandboxes
# --------------------------------------------------------------------------
def test_image_files_visible(vm):
    r = vm.run("cat /etc/marker; ls /bin/busybox; cat /etc/hostname >/dev/null && echo ok")
    assert r.exit_code == 0 and r.stdout == "warren-e2e-rootfs\n/bin/busybox\nok\n", r


def test_writes_do_not_leak_between_sandboxes(server, vm, vm2):
    vm.write_file("/root/only-in-a", b"a")
    r = server.cli("exec", vm2, "--", "sh", "-c",
                   "ls /root/only-in-a 2>/dev/null || echo absent; "
                   "echo changed-in-b > /etc/marker; echo b > /tmp/only-in-b; cat /etc/marker")
    assert r.returncode == 0 and r.stdout == "absent\nchanged-in-b\n", r
    r = vm.run("cat /etc/marker; ls /tmp/only-in-b 2>/dev/null || echo absent; cat /root/only-in-a")
    assert r.stdout == "warren-e2e-rootfs\nabsent\na", r
    # and nothing went back to the image: the host's tree and a new sandbox see the original
    if server.rootfs:
        with open(os.path.join(server.rootfs, "etc/marker")) as f:
            assert f.read() == "warren-e2e-rootfs\n"


def test_runs_on_the_guest_kernel(server, vm):
    r = vm.run("hostname; uname -r")
    assert r.exit_code == 0, r
    hostname, release = r.stdout.splitlines()
    assert hostname and hostname != os.uname().nodename, r
    assert release == _node(server)["microvm"]["guest_kernel"], r


# --------------------------------------------------------------------------
# network
# --------------------------------------------------------------------------
def test_network_none_only_loopback(vm):
    """Every microVM has a NIC (a template's devices must match its restores'), but in mode none
    it is attached to nothing, stays down and has no address: only lo is up."""
    r = vm.run("ip addr")
    assert r.exit_code == 0, r
    up, current, addressed = [], None, set()
    for line in r.stdout.splitlines():
        m = re.match(r"^\d+:\s+([^:@\s]+):\s+<([^>]*)>", line)
        if m:
            current = m.group(1)
            if "UP" in m.group(2).split(","):
                up.append(current)
        elif line.strip().startswith(("inet ", "inet6 ")):
            addressed.add(current)
    assert up == ["lo"] and addressed <= {"lo"}, f"`ip addr` in the microVM:\n{r.stdout}"
    r = vm.run("ip route")
    assert r.exit_code == 0 and "default" not in r.stdout, r
    r = vm.run("nc -w 2 10.0.0.1 80 </dev/null")
    assert r.exit_code != 0, r


def test_none_microvm_cannot_switch_to_egress(server, vm):
    """A microVM made without egress has no link to bridge its NIC to (and -M microvm has no
    hotplug): switching it to egress is refused with 503 and changes nothing."""
    r = server.http("PUT", f"/v1/sandboxes/{vm.id}/network", {"mode": "egress", "allow": ["pkg.test"]})
    u.assert_error(r, 503, "unavailable")
    r = server.cli("net", vm.id, "--allow", "pkg.test")
    assert r.returncode != 0 and ERROR_LINE.match(r.stderr.strip().splitlines()[0]), r
    doc = server.http("GET", f"/v1/sandboxes/{vm.id}").json
    assert doc["network"]["mode"] == "none" and doc["state"] == "running", doc
    # none stays settable, and the sandbox still works
    r = server.http("PUT", f"/v1/sandboxes/{vm.id}/network", {"mode": "none", "allow": []})
    assert r.status == 200 and r.json["network"]["mode"] == "none", r
    assert vm.run("echo ok").stdout == "ok\n"


# --------------------------------------------------------------------------
# pause / resume
# --------------------------------------------------------------------------
def test_pause_resume(server, vm):
    vm.write_file("/tmp/before-pause", b"kept\n")
    pid = _qemu_pid(server, vm.id)
    cg = _v2_dir(server, vm.id)
    r = server.cli("pause", vm.id)
    assert r.returncode == 0, r
    try:
        assert server.http("GET", f"/v1/sandboxes/{vm.id}").json["state"] == "paused"
        with open(cg + "/cgroup.events") as f:
            assert "frozen 1" in f.read().splitlines(), f"QEMU's cgroup is not frozen: {cg}"
        # frozen: the VM's vCPUs and QEMU's threads use no CPU at all
        t0 = _cpu_ticks(pid)
        time.sleep(1.0)
        assert _cpu_ticks(pid) == t0, "QEMU kept running while the sandbox was paused"
        u.assert_error(server.http("POST", f"/v1/sandboxes/{vm.id}/exec", {"argv": ["true"]}), 409, "conflict")
        r = server.cli("exec", vm.id, "--", "true")
        assert r.returncode != 0 and ERROR_LINE.match(r.stderr.strip().splitlines()[0]), r
    finally:
        r = server.cli("resume", vm.id)
    assert r.returncode == 0, r
    assert server.http("GET", f"/v1/sandboxes/{vm.id}").json["state"] == "running"
    assert vm.run("cat /tmp/before-pause").stdout == "kept\n"
    assert _qemu_pid(server, vm.id) == pid, "the VM was replaced across pause/resume"
    # and through the HTTP API
    r = server.http("POST", f"/v1/sandboxes/{vm.id}/pause")
    assert r.status == 200 and r.json["state"] == "paused", r
    r = server.http("POST", f"/v1/sandboxes/{vm.id}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    assert vm.run("echo back").stdout == "back\n"


# --------------------------------------------------------------------------
# limits
# --------------------------------------------------------------------------
def test_cpus_are_ceil_of_spec(server, vm, vm2):
    r = vm.run("nproc; grep -c ^processor /proc/cpuinfo")
    assert r.exit_code == 0 and r.stdout.split() == [str(CPU)] * 2, f"cpu {CPU}: {r}"
    r = server.cli("exec", vm2, "--", "nproc")
    assert r.returncode == 0 and r.stdout.strip() == str(math.ceil(1.5)), f"cpu 1.5: {r}"


def test_memory_bomb_is_killed(server, vm):
    pid = _qemu_pid(server, vm.id)
    vm.write_file("/tmp/before-bomb", b"x")
    # dd's one buffer of 300 MiB, filled from /dev/zero: more than the 256 MiB limit
    t0 = time.time()
    r = vm.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1"], timeout=120)
    assert _killed(r), f"300 MiB allocated in a {MEMORY_MB}M microVM: {r}"
    assert time.time() - t0 < 120
    # the sandbox still answers: the same VM (no guest reboot), its agent alive
    assert _answers(vm, 30), "the microVM did not answer after its memory bomb"
    assert vm.read_file("/tmp/before-bomb") == b"x"
    assert _qemu_pid(server, vm.id) == pid
    # control: the same program within the limit runs to the end, so the kill was the limit's doing
    r = vm.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=192M", "count=1"], timeout=120)
    assert r.exit_code == 0, f"192 MiB in a {MEMORY_MB}M microVM: {r}"
    u.assert_alive(server)


@pytest.mark.parametrize("target", ["/fill", "/tmp/fill"])
def test_disk_limit(vm, target):
    r = vm.run(f"dd if=/dev/zero of={target} bs=1M count=200", timeout=120)
    assert r.exit_code != 0 and "No space left on device" in r.stderr, f"200 MiB written with disk {DISK_MB}M: {r}"
    size = int(vm.run(f"wc -c < {target}").stdout.strip())
    assert size <= (DISK_MB + 1) << 20, f"{size} bytes written with a {DISK_MB} MiB disk"
    r = vm.run(f"rm -f {target}; echo small > /root/small; cat /root/small; rm /root/small")
    assert r.exit_code == 0 and r.stdout == "small\n", r


def test_fork_bomb_is_capped_by_pids(server, vm):
    pid = _qemu_pid(server, vm.id)
    # Forks until fork fails; each child lives a second. The count is written before each fork.
    r = vm.run("i=0; while :; do echo $i > /tmp/forks; sleep 1 & i=$((i+1)); done", timeout=60)
    assert not r.timed_out, f"forking never failed with pids {PIDS}: {r}"
    assert r.exit_code != 0 and ("fork" in r.stderr or "Resource temporarily unavailable" in r.stderr), r
    assert _answers(vm, 30), "the microVM did not answer after the fork loop"
    forks = int(vm.read_file("/tmp/forks").strip())
    assert 0 < forks < PIDS, f"{forks} processes forked with pids={PIDS}"
    # the classic, self-replicating one: it ends, and the sandbox answers again
    t0 = time.time()
    r = vm.run("b(){ b|b& }; b", timeout=10)
    assert r.state == "exited", r
    assert time.time() - t0 < 30
    assert _answers(vm, 90), "the microVM did not answer within 90 s of its fork bomb"
    left = u.wait_until(lambda: vm.run("ps -o args | grep -c '^sh -c b()'").stdout.strip() == "0", 90, 1)
    assert left, "the fork bomb is still running in the microVM after 90 s"
    assert _qemu_pid(server, vm.id) == pid
    u.assert_alive(server)


# --------------------------------------------------------------------------
# delete
# --------------------------------------------------------------------------
def test_delete_leaves_nothing(server, image, sandboxes):
    m0 = _node(server)["microvm"]
    sid = _cli_create(server, image, sandboxes)
    m1 = _node(server)["microvm"]
    assert m1["restores"] + m1["cold_boots"] == m0["restores"] + m0["cold_boots"] + 1, (m0, m1)
    if m1["snapshots"]:
        assert m1["restores"] == m0["restores"] + 1, f"with snapshots on, a sandbox was not restored: {m0} -> {m1}"

    r = server.cli("exec", sid, "--", "cat", "/etc/marker")
    assert r.returncode == 0 and r.stdout == "warren-e2e-rootfs\n", r
    cgdirs = _cgroup_dirs(server, sid)
    assert cgdirs, f"no cgroup directory named after {sid}: {u.cgroup_dirs_named(sid)}"
    procs = _procs(_v2_dir(server, sid))
    qemu = _qemu_pid(server, sid)
    started = {p: _start_time(p) for p in procs}
    host_uid = u.uids(qemu)[0]
    pidns = u.ns(qemu, "pid")
    assert host_uid != 0

    t0 = time.time()
    r = server.http("DELETE", f"/v1/sandboxes/{sid}", timeout=60)
    assert r.status == 204, r
    assert time.time() - t0 < 30, f"DELETE took {time.time() - t0:.1f}s"

    def qemu_gone():
        return all(_start_time(p) != started[p] for p in procs)
    assert u.wait_until(qemu_gone, 10), \
        f"QEMU of {sid} still running after rm: {[(p, u.cmdline(p)[:3]) for p in procs if _start_time(p) == started[p]]}"
    left = u.wait_until(lambda: not u.processes_in_ns(pidns) and not u.processes_with_uid(host_uid), 10)
    assert left, (f"after rm: processes in QEMU's pid namespace: {u.processes_in_ns(pidns)}, "
                  f"with its host uid {host_uid}: {u.processes_with_uid(host_uid)}")
    # no qemu-system process is left in the sandbox's cgroup or under its uid
    stray = [p for p in u.pids() if u.cmdline(p) and "qemu-system" in u.cmdline(p)[0]
             and (u.uids(p) or (None,))[0] == host_uid]
    assert not stray, f"qemu processes with the sandbox's uid left: {stray}"
    still = [d for d in cgdirs if os.path.exists(d)]
    assert not still, f"cgroup dirs left after rm: {still}"
    named = u.cgroup_dirs_named(sid)
    assert not named, f"cgroup dirs named after the sandbox left: {named}"
    for who in ("self", server.proc.pid):
        lines = [l for l in u.mountinfo(who) if sid in l]
        assert not lines, f"mounts left in mount ns of {who}: {lines}"
    files = [os.path.join(d, n) for d, dirs, names in os.walk(server.data_dir) for n in dirs + names if sid in n]
    assert not files, f"files left in the data dir after rm: {files}"
    u.assert_error(server.http("GET", f"/v1/sandboxes/{sid}"), 404, "not_found")
    r = server.cli("inspect", sid)
    assert r.returncode != 0, r


# --------------------------------------------------------------------------
# the warm pool
# --------------------------------------------------------------------------
def test_warm_pool_serves_creates_with_their_own_layers(server, image, sandboxes):
    """Once a size is in use the node keeps restored VMs waiting (network none); a create takes
    one, which then holds this sandbox's layers, cgroup and limits, not the placeholder's."""
    m = _node(server)["microvm"]
    if not m["snapshots"]:
        pytest.fail("the e2e server runs with snapshots on")
    assert m["warm_pool"] >= 1, m
    assert u.wait_until(lambda: _node(server)["microvm"]["warm_ready"] >= 1, 120, 1), _node(server)["microvm"]
    w0 = _node(server)["microvm"]["warm_starts"]
    sb = server.client().create({"image": image, **SPEC})
    sandboxes.append(sb.id)
    assert _node(server)["microvm"]["warm_starts"] == w0 + 1, _node(server)["microvm"]
    r = sb.run("cat /etc/marker; hostname; nproc; echo x > /root/w && cat /root/w")
    assert r.stdout.split("\n")[:4] == ["warren-e2e-rootfs", sb.id, str(CPU), "x"], r
    # QEMU is in the sandbox's own cgroup, alone, and no warm-* group holds it
    qemu = _qemu_pid(server, sb.id)
    with open(f"/proc/{qemu}/cgroup") as f:
        assert "warm-" not in f.read()
    sb.delete()
    assert not u.cgroup_dirs_named(sb.id)


def test_integrity_tool_guard_policy_and_report(server, image, sandboxes, tmp_path):
    """Issue 23 in a microVM: a tool's files stay as built against the guest's root, a
    filesystem policy holds for a process that opened a file before it, and the tamper report
    names every change, all done by the guest's own agent."""
    tool = tmp_path / "tool"
    (tool / "opt/tools/vmgrader/bin").mkdir(parents=True)
    grade = tool / "opt/tools/vmgrader/bin/grade"
    grade.write_text("#!/bin/sh\necho graded\n")
    grade.chmod(0o755)
    r = server.cli("image", "build", "e2e-vm-grader:1", "--from-dir", str(tool), "--kind", "tool", timeout=300)
    assert r.returncode == 0, r.stderr
    try:
        sb = server.client().create({"image": image, "tools": ["e2e-vm-grader:1"], **SPEC})
        sandboxes.append(sb.id)
        r = sb.run("echo hacked > /opt/tools/vmgrader/bin/grade; mv /opt /opt2; "
                   "rm -rf /opt/tools/vmgrader; /opt/tools/vmgrader/bin/grade")
        assert r.stdout == "graded\n", r
        assert "Read-only file system" in r.stderr and "busy" in r.stderr, r
        # No chroot for commands here: their root is a chroot over the initramfs, which the
        # chroot-and-climb escape would reach (the raw writable layer, the commands' cgroup).
        r = sb.run("chroot / /bin/true")
        assert r.exit_code != 0 and "Operation not permitted" in r.stderr, r

        sb.run("echo orig > /root/answer")
        holder = sb.start(["sh", "-c", "exec 3<> /root/answer; touch /tmp/ready; "
                                       "while [ ! -e /tmp/go ]; do sleep 0.1; done; echo hacked >&3; echo held"])
        assert u.wait_until(lambda: sb.run("test -e /tmp/ready").exit_code == 0, 30, 0.2)
        sb.set_filesystem(["/etc", "/root"])
        r = sb.run("echo x > /etc/marker; echo y > /root/answer; touch /tmp/go")
        assert r.stderr.count("Operation not permitted") == 2, r
        assert u.wait_until(lambda: sb.exec_result(holder).state == "exited", 30, 0.2)
        assert sb.exec_result(holder).stdout == "held\n"
        assert sb.run("cat /root/answer /etc/marker").stdout == "orig\nwarren-e2e-rootfs\n"
        assert [(c["path"], c["change"]) for c in sb.changes()] == [
            ("/root/answer", "added"), ("/tmp/go", "added"), ("/tmp/ready", "added")]
        sb.set_filesystem()
        assert sb.run("echo y > /root/answer && cat /root/answer").stdout == "y\n"
    finally:
        server.cli("image", "rm", "e2e-vm-grader:1")
