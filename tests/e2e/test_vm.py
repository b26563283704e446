"""The vm backend end to end: a whole machine per sandbox (a QEMU q35 PC) booting the image's
own systemd, with warren-agent as one of its services; the same API as containers.

The image is Debian bookworm with systemd-sysv and python3 (conftest `vm_image`); an image
without systemd runs with the agent as init. Every VM
boots cold (under TCG here that is 8-10 s), so the module shares one and only the tests that
need a fresh one (delete, a bad image) make their own.
"""

from __future__ import annotations

import os
import time

import pytest

import warren
import e2e_util as u
from test_microvm import _cgroup_dirs, _node, _procs, _qemu_pid, _start_time, _v2_dir

MEMORY_MB, CPU, DISK_MB, PIDS = 256, 2, 128, 64
SPEC = dict(backend="vm", memory_mb=MEMORY_MB, cpu=CPU, disk_mb=DISK_MB, pids=PIDS)


@pytest.fixture(scope="module")
def fullvm(server, vm_image):
    sb = server.client().create({"image": vm_image, **SPEC})
    try:
        yield sb
    finally:
        try:
            sb.delete()
        except warren.WarrenError:
            pass


def test_nodes_offer_vm(server, fullvm):
    n = _node(server)
    assert "vm" in n["backends"] and "microvm" in n["backends"], n
    assert n["microvm"]["vm_boots"] >= 1, n["microvm"]
    got = server.http("GET", f"/v1/sandboxes/{fullvm.id}").json
    assert got["backend"] == "vm" and got["state"] == "running", got


def test_systemd_is_init_and_the_agent_its_service(server, fullvm):
    r = fullvm.run("cat /proc/1/comm; readlink -f /sbin/init; systemctl is-active warren-agent; "
                   "cat /proc/self/cgroup; hostname; uname -r; . /etc/os-release; echo $VERSION_CODENAME")
    assert r.exit_code == 0, r
    comm, init, active, cgroup, hostname, release, codename = r.stdout.split("\n")[:7]
    assert comm == "systemd" and init.endswith("/systemd"), r.stdout
    assert active == "active", r.stdout
    # commands run in the limits' cgroup, outside systemd's tree
    assert cgroup == "0::/commands", r.stdout
    assert hostname == fullvm.id, r.stdout
    assert release == _node(server)["microvm"]["guest_kernel"], r.stdout
    assert codename == "bookworm", r.stdout
    # systemd manages the machine: its units run (journald at least)
    r = fullvm.run("systemctl is-active systemd-journald")
    assert r.stdout.strip() == "active", r
    # and root is the machine's root: every capability, mounts work
    r = fullvm.run("grep CapEff /proc/self/status; mkdir -p /mnt/t && mount -t tmpfs t /mnt/t && "
                   "grep -c ' /mnt/t ' /proc/mounts && umount /mnt/t")
    assert r.exit_code == 0 and r.stdout.split() == ["CapEff:", "000001ffffffffff", "1"], r


def test_exec_stdout_stderr_exit_code_env_cwd_stdin(fullvm):
    r = fullvm.run("echo out; echo err >&2; exit 7")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 7), r
    r = fullvm.run(["sh", "-c", 'echo "$FOO $(pwd)"; cat'], env={"FOO": "bar"}, cwd="/tmp", stdin="piped")
    assert r.stdout == "bar /tmp\npiped", r
    t0 = time.time()
    r = fullvm.run("sleep 30", timeout=1)
    assert r.timed_out and time.time() - t0 < 15, r


def test_pty_on_a_whole_machine(fullvm):
    """The agent as a systemd service opens the terminal in the machine's own devpts."""
    with fullvm.pty(["bash", "--norc", "-i"], rows=25, cols=90) as term:
        term.write("stty size; tty; echo $TERM\n")
        term.read_until("25 90", timeout=60)
        term.read_until("xterm", timeout=30)
        term.resize(30, 100)
        term.write("stty size; exit 4\n")
        term.read_until("30 100", timeout=30)
        assert term.wait(timeout=60).exit_code == 4


def test_files_round_trip(server, fullvm, tmp_path):
    data = bytes(range(256)) * 64
    fullvm.write_file("/root/blob.bin", data)
    assert fullvm.read_file("/root/blob.bin") == data
    r = fullvm.run("sha256sum /root/blob.bin | cut -c1-16")
    import hashlib
    assert r.stdout.strip() == hashlib.sha256(data).hexdigest()[:16], r
    src = tmp_path / "in.txt"
    src.write_text("through the CLI\n")
    r = server.cli("cp", str(src), f"{fullvm.id}:/tmp/in.txt")
    assert r.returncode == 0, r.stderr
    r = server.cli("cp", f"{fullvm.id}:/tmp/in.txt", str(tmp_path / "out.txt"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.txt").read_text() == "through the CLI\n"


def test_limits_of_the_spec(fullvm):
    r = fullvm.run("nproc; cat /sys/fs/cgroup/commands/memory.max /sys/fs/cgroup/commands/pids.max; "
                   "df -m / | tail -1")
    lines = r.stdout.split("\n")
    assert lines[0] == str(CPU), r.stdout
    assert int(lines[1]) == MEMORY_MB << 20 and lines[2] == str(PIDS), r.stdout
    size_mb = int(lines[3].split()[1])
    assert DISK_MB * 0.9 <= size_mb <= DISK_MB * 1.1, r.stdout


def test_memory_bomb_is_killed_and_the_vm_answers(fullvm):
    r = fullvm.run(["python3", "-c", "b = bytearray(1 << 30); print('survived')"], timeout=120)
    assert r.exit_code != 0 and "survived" not in r.stdout, r
    r = fullvm.run("echo still-here | cat")
    assert r.stdout == "still-here\n", r


def test_writes_stay_in_the_sandbox_and_the_disk_limit_holds(fullvm):
    r = fullvm.run("dd if=/dev/zero of=/var/tmp/fill bs=1M count=400 2>&1; echo rc=$?; rm -f /var/tmp/fill")
    assert "No space left on device" in r.stdout and "rc=0" not in r.stdout, r


def test_network_none_is_loopback_only(fullvm):
    r = fullvm.run(["python3", "-c", """
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("10.0.0.1", 80)); print("connected")
except OSError as e:
    print("errno", e.errno)
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); c = socket.create_connection(l.getsockname())
print("loopback ok")
"""])
    assert r.stdout == "errno 101\nloopback ok\n", r


def test_image_without_systemd_runs_with_the_agent_as_init(server, image, sandboxes):
    """Switching backend stays one parameter: the busybox image (its /sbin/init is busybox)
    runs as a whole VM too, with warren-agent as its init as in a microVM."""
    sb = server.client().create({"image": image, **SPEC})
    sandboxes.append(sb.id)
    r = sb.run("cat /proc/1/comm; cat /etc/marker; ls /sys/bus/pci/devices | wc -l; nproc")
    comm, marker, pci, nproc = r.stdout.split("\n")[:4]
    assert comm == "init" and marker == "warren-e2e-rootfs", r
    assert int(pci) > 3, "not a q35 PC: " + r.stdout  # a microVM has no PCI devices
    assert nproc == str(CPU), r
    got = server.http("GET", f"/v1/sandboxes/{sb.id}").json
    assert got["backend"] == "vm" and got["state"] == "running", got
    sb.delete()
    assert not u.cgroup_dirs_named(sb.id)


def test_delete_leaves_nothing(server, vm_image, sandboxes):
    sb = server.client().create({"image": vm_image, **SPEC})
    sandboxes.append(sb.id)
    sid = sb.id
    assert sb.run("true").exit_code == 0
    cgdirs = _cgroup_dirs(server, sid)
    assert cgdirs
    procs = _procs(_v2_dir(server, sid))
    qemu = _qemu_pid(server, sid)
    started = {p: _start_time(p) for p in procs}
    host_uid = u.uids(qemu)[0]
    assert host_uid != 0
    r = server.http("DELETE", f"/v1/sandboxes/{sid}", timeout=60)
    assert r.status == 204, r
    assert u.wait_until(lambda: all(_start_time(p) != started[p] for p in procs), 10), "QEMU still running"
    assert u.wait_until(lambda: not u.processes_with_uid(host_uid), 10), u.processes_with_uid(host_uid)
    assert not [d for d in cgdirs if os.path.exists(d)]
    assert not u.cgroup_dirs_named(sid), u.cgroup_dirs_named(sid)
    for who in ("self", server.proc.pid):
        assert not [l for l in u.mountinfo(who) if sid in l]
    files = [os.path.join(d, n) for d, dirs, names in os.walk(server.data_dir) for n in dirs + names if sid in n]
    assert not files, files
    run_dir = f"/run/warren/{_node(server)['cgroup_parent']}"
    left = [n for n in os.listdir(run_dir) if sid in n] if os.path.isdir(run_dir) else []
    assert not left, left
    u.assert_error(server.http("GET", f"/v1/sandboxes/{sid}"), 404, "not_found")
