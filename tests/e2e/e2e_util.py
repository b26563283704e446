"""Helpers shared by the end-to-end tests: raw HTTP and host-side inspection."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import socket
import time
from typing import Dict, Iterable, List, Optional, Tuple

CONTRACT_CODES = {"not_found", "invalid", "conflict", "quota", "unauthorized",
                  "forbidden", "unavailable", "internal"}


# --------------------------------------------------------------------------
# ports
# --------------------------------------------------------------------------
_handed_out: set = set()


def _ephemeral_range() -> Tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A loopback TCP port no one listens on, taken from below the kernel's ephemeral range.

    A port the kernel hands out for `bind(0)` comes from the same range it picks the local
    ports of outgoing connections from: a server stopped and started again on such a port
    (an etcd member, a restarted daemon) can find it taken by some client's connection in
    between and fail with EADDRINUSE. Ports below the range are never picked that way."""
    low, _ = _ephemeral_range()
    first = 20000 if low > 21000 else 1024
    for _ in range(1000):
        port = random.randrange(first, low)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {first}..{low - 1}")


# --------------------------------------------------------------------------
# raw HTTP
# --------------------------------------------------------------------------
class Response:
    def __init__(self, status: int, headers, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<HTTP {self.status} {self.body[:300]!r}>"


def http_request(server, method: str, path: str, body=None, *, headers: Optional[Dict[str, str]] = None,
                 auth: Optional[bool] = True, token: Optional[str] = None, timeout: float = 120) -> Response:
    """One request on a fresh connection. ``body`` may be bytes, str or a JSON-able object."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    h = {}
    if auth:
        h["Authorization"] = "Bearer " + (token if token is not None else server.token)
    if body is not None and not isinstance(body, (bytes, bytearray, str)):
        body = json.dumps(body)
        h["Content-Type"] = "application/json"
    if isinstance(body, str):
        body = body.encode()
    if headers:
        h.update(headers)
    try:
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        return Response(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


def assert_error(resp: Response, status, code: Optional[str] = None) -> dict:
    """The response is a contract error: the given status and {"error": {"code", "message"}}."""
    statuses = status if isinstance(status, (tuple, list, set)) else (status,)
    assert resp.status in statuses, f"expected HTTP {statuses}, got {resp!r}"
    try:
        doc = json.loads(resp.body)
    except ValueError:
        raise AssertionError(f"error body is not JSON: {resp!r}") from None
    assert isinstance(doc, dict) and isinstance(doc.get("error"), dict), f"bad error shape: {doc!r}"
    err = doc["error"]
    assert err.get("code") in CONTRACT_CODES, f"error code not in the contract: {doc!r}"
    if code is not None:
        assert err["code"] == code, f"expected code {code!r}, got {doc!r}"
    assert isinstance(err.get("message"), str) and err["message"], f"no error message: {doc!r}"
    return err


def assert_alive(server) -> None:
    r = http_request(server, "GET", "/healthz", auth=False, timeout=10)
    assert r.status == 200, f"/healthz after the test: {r!r}"
    assert server.proc.poll() is None, "the server process exited"


# --------------------------------------------------------------------------
# host-side inspection
# --------------------------------------------------------------------------
def pids() -> List[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]] if raw else []


def ns(pid, kind: str = "pid") -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def uids(pid: int) -> Optional[Tuple[int, int, int, int]]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return tuple(int(x) for x in line.split()[1:5])  # type: ignore
    except OSError:
        return None
    return None


def find_sandboxed(argv: List[str], timeout: float = 15.0) -> List[int]:
    """Host pids running exactly ``argv`` in a pid namespace other than ours."""
    mine = ns("self")
    deadline = time.time() + timeout
    while True:
        found = [p for p in pids() if cmdline(p) == argv and ns(p) not in (None, mine)]
        if found or time.time() > deadline:
            return found
        time.sleep(0.1)


def _unescape(s: str) -> str:
    return s.encode().decode("unicode_escape") if "\\" in s else s


def mountinfo(pid="self") -> List[str]:
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            return f.read().splitlines()
    except OSError:
        return []


def mount_points_under(path: str, pid="self") -> List[str]:
    path = os.path.realpath(path)
    out = []
    for line in mountinfo(pid):
        mp = _unescape(line.split()[4])
        if mp == path or mp.startswith(path.rstrip("/") + "/"):
            out.append(mp)
    return out


def cgroup_dirs_of(pid: int) -> List[str]:
    """The host directories of the cgroups ``pid`` belongs to (v1 and v2)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            entries = [l.rstrip("\n").split(":", 2) for l in f if l.strip()]
    except OSError:
        return []
    mounts = []   # (kind, options set, root, mount point)
    for line in mountinfo("self"):
        pre, _, post = line.partition(" - ")
        f = pre.split()
        p = post.split()
        if not p:
            continue
        fstype = p[0]
        if fstype == "cgroup2":
            mounts.append(("v2", set(), _unescape(f[3]), _unescape(f[4])))
        elif fstype == "cgroup" and len(p) >= 3:
            mounts.append(("v1", set(p[2].split(",")), _unescape(f[3]), _unescape(f[4])))
    out = []
    for _, ctrls, path in entries:
        for kind, opts, root, mp in mounts:
            if ctrls == "":
                if kind != "v2":
                    continue
            else:
                if kind != "v1" or not set(ctrls.split(",")) <= opts:
                    continue
            rel = os.path.relpath(path, root) if path.startswith(root) else None
            if rel is None or rel.startswith(".."):
                continue
            out.append(os.path.normpath(os.path.join(mp, rel)))
            break
    return out


def cgroup_dirs_named(fragment: str, top: str = "/sys/fs/cgroup") -> List[str]:
    found = []
    for dirpath, dirnames, _ in os.walk(top):
        for d in dirnames:
            if fragment in d:
                found.append(os.path.join(dirpath, d))
    return found


def processes_with_uid(uid: int) -> List[int]:
    out = []
    for p in pids():
        u = uids(p)
        if u is not None and uid in u:
            out.append(p)
    return out


def processes_in_ns(ns_link: str, kind: str = "pid") -> List[int]:
    return [p for p in pids() if ns(p, kind) == ns_link]


def wait_until(pred, timeout: float = 10.0, interval: float = 0.1):
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() > deadline:
            return v
        time.sleep(interval)


def ndjson_lines(body: bytes) -> List[dict]:
    return [json.loads(l) for l in body.split(b"\n") if l.strip()]


def unique(prefix: str = "e2e") -> str:
    return f"{prefix}-{os.getpid()}-{time.time_ns() % 10**9}"


def start_test_hosts(ns: str, veth: str, prefix: str, ips: Iterable[str], argv: List[str],
                     prefix6: str = "", ips6: Iterable[str] = ()):
    """Test hosts in a network namespace `ns` the caller names (never anything outside this
    machine): `ips` on its eth0, routed from the host through the veth `veth` (host side
    `prefix`.1/24), and as many IPv6 `ips6` (host side `prefix6`::1/64), running `argv` there,
    which must print `ready` once it serves. Returns the process; stop_test_hosts undoes all
    of it."""
    import subprocess

    def sh(*a):
        subprocess.run(a, check=True, capture_output=True, text=True)

    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh("ip", "addr", "add", f"{prefix}.1/24", "dev", veth)
    sh("ip", "link", "set", veth, "up")
    for ip in ips:
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", ns, "route", "add", "default", "via", f"{prefix}.1")
    if ips6:
        # nodad: usable at once, not after a second of duplicate detection.
        sh("ip", "-6", "addr", "add", f"{prefix6}::1/64", "dev", veth, "nodad")
        for ip in ips6:
            sh("ip", "-n", ns, "-6", "addr", "add", f"{ip}/64", "dev", "eth0", "nodad")
        sh("ip", "-n", ns, "-6", "route", "add", "default", "via", f"{prefix6}::1")
    proc = subprocess.Popen(["ip", "netns", "exec", ns] + argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise RuntimeError(f"test hosts in {ns} did not start: {line}{proc.stdout.read()}")
    return proc


def stop_test_hosts(proc, ns: str, veth: str) -> None:
    import subprocess
    if proc is not None:
        proc.kill()
        proc.wait()
    subprocess.run(["ip", "link", "del", veth], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


_USAGE_ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu")


def node_usage(server) -> tuple[int, int, int]:
    """(sandboxes, uid slots, cgroup dirs) in use, not counting the node's warm pool (ready
    sandboxes it keeps for creates, each with a uid slot and a cgroup per hierarchy). Waits
    until the pool is not making one, so the three readings agree."""
    parent = "warren-" + hashlib.sha256(os.path.realpath(server.data_dir).encode()).hexdigest()[:8]
    roots = [os.path.join(r, parent) for r in _USAGE_ROOTS if os.path.isdir(os.path.join(r, parent))]
    last = None
    for _ in range(600):
        node = server.http("GET", "/v1/nodes").json["nodes"][0]
        warm = node.get("warm_pool", {})
        dirs = sum(1 for r in roots for e in os.listdir(r) if e.startswith(("sb-", "warm-")))
        again = server.http("GET", "/v1/nodes").json["nodes"][0]
        if warm.get("making", 0) == 0 and again.get("warm_pool", {}) == warm and \
                again["uid_slots_used"] == node["uid_slots_used"]:
            ready = warm.get("ready", 0)
            now = (node["sandboxes"], node["uid_slots_used"] - ready, dirs - ready * len(roots))
            if now == last:
                return now
            last = now
        time.sleep(0.1)
    raise AssertionError(f"the node's warm pool never settled: {last}")
