"""Cross-sandbox and host visibility (THREATS B.1 #10, B.3 #29, B.4 #31-#36)."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import time

import pytest

import e2e_util as u
from sec_util import healthy, one, pick


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_chroot_double_escape(make_sandbox, server, weak):
    """#29: chroot into a subdirectory, walk `..` from the outside cwd and through a saved fd
    to the old root, chroot("."): the result must still be the sandbox's root."""
    sb = make_sandbox()
    host_path = server.data_dir  # exists on the host only
    r = one(sb.attack("chroot", host_path), "chroot_escape")
    assert r["host_path_visible"] is False, f"escaped to the host filesystem: {r}"
    assert r["same_root_as_start"] is True and r["sandbox_marker"] is True, r
    # control: the weak sandbox shares the host's filesystem, and the probe notices
    ctl = one(weak("chroot", host_path), "chroot_escape")
    assert ctl["host_path_visible"] is True, ctl


def test_overwriting_bin_sh_stays_in_its_sandbox(make_sandbox, server):
    """#10 (DSec): an occupant overwrites /bin/sh (busybox) in place and replaces the /bin/sh
    symlink; another sandbox from the same image, made before or after, is unaffected."""
    busybox = shutil.which("busybox", path="/bin:/usr/bin")
    good = _sha(open(busybox, "rb").read())
    a = make_sandbox()
    b = make_sandbox(install=False)
    r = one(a.attack("overwrite", "/bin/sh", "PWNED-BY-A"), "overwrite")
    assert r["ret"] == len("PWNED-BY-A"), f"the in-place overwrite did not even work in A: {r}"
    got = a.get("/bin/busybox")
    assert got.status == 200 and got.body.startswith(b"PWNED-BY-A"), "A does not see its own write"
    # the symlink itself, replaced by a script
    w = a.put("/tmp/evil-sh", b"#!/tmp/none\n", mode="0755")
    assert w.status == 204
    c = make_sandbox(install=False)
    for sb in (b, c):
        body = sb.get("/bin/busybox")
        assert body.status == 200 and _sha(body.body) == good, f"{sb.id}: /bin/busybox changed"
        res = sb.exec(["/bin/sh", "-c", "echo intact"], timeout_s=20)
        assert res["exit_code"] == 0 and res["stdout"] == "intact\n", res
    assert _sha(open(busybox, "rb").read()) == good, "the host's busybox changed"


def test_other_sandbox_invisible_through_proc(make_sandbox, server):
    """#31/#32: B looks for A's secret in every /proc/PID/{root,cwd}/tmp/secret, environ and
    cmdline it can see, and guesses pids 2..4095.  Control: A's own scan finds it."""
    secret = "warren-secret-" + u.unique("s")
    a = make_sandbox()
    b = make_sandbox()
    assert a.put("/tmp/secret", secret.encode()).status == 204
    r = server.http("POST", f"/v1/sandboxes/{a.id}/exec",
                    {"argv": ["/bin/sh", "-c", f"sleep 60; : {secret}"], "env": {"SECRET": secret},
                     "wait": False, "timeout_s": 90})
    assert r.status in (200, 202), r
    time.sleep(0.5)
    ctl = one(a.attack("proc_scan", secret, "/tmp/secret"), "proc_scan")
    assert ctl["found"] > 0, f"control: A does not find its own secret: {ctl}"
    res = one(b.attack("proc_scan", secret, "/tmp/secret", timeout_s=120), "proc_scan")
    assert res["found"] == 0 and res["found_by_guess"] == 0, f"B reads A's secret: {res}"
    assert res["pids"] <= 3, f"B sees {res['pids']} processes: {res['pid_list']}"


def test_host_processes_invisible(make_sandbox, server):
    """#31: the daemon's pid (and every other host pid) is absent from the sandbox's /proc."""
    sb = make_sandbox()
    pid = server.proc.pid
    res = sb.exec(["/bin/sh", "-c", f"ls /proc/{pid}/ 2>&1; ls -d /proc/[0-9]*"], timeout_s=20)
    visible = [p.rsplit("/", 1)[1] for p in res["stdout"].split() if p.startswith("/proc/") and p[6:].isdigit()]
    assert len(visible) <= 4, f"host processes visible: {visible}"
    assert pid <= 4 or str(pid) not in visible
    # control: on the host it is there
    assert os.path.isdir(f"/proc/{pid}")


def test_host_loopback_and_abstract_sockets_unreachable(make_sandbox, server):
    """#34/#36: the daemon listens on the host's 127.0.0.1; an abstract UNIX socket lives in
    the host's network namespace.  Neither is reachable from the sandbox."""
    name = u.unique("warren-sec-abstract")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
        listener.listen(4)
        # controls: both are reachable from the host
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect("\0" + name)
        sb = make_sandbox()
        results = sb.attack("net", str(server.port), name)
        tcp = one(results, "connect_host_loopback")
        assert tcp["ret"] < 0, f"the sandbox reached the host's 127.0.0.1:{server.port}: {tcp}"
        ab = one(results, "connect_abstract_unix")
        assert ab["ret"] < 0, f"the sandbox reached a host abstract socket: {ab}"
    finally:
        listener.close()
