"""Security tier: real attacks from inside real sandboxes.

Run as root, from the repository root, alone or with the end-to-end tier:
    /usr/bin/python3 -m pytest -q tests/security
    /usr/bin/python3 -m pytest -q tests/e2e tests/security

The fixtures of tests/e2e/conftest.py (a real `warren serve` on loopback, the busybox image
`t:1`, the `sandboxes` cleanup list) are reused: that file is loaded once under the module
name ``warren_e2e_conftest`` and its fixtures are re-exported here, so this directory works
whether or not tests/e2e is collected in the same run.  (When both are, each directory gets
its own server: pytest scopes conftest fixtures to their directory.)

This file adds: the attack and probe binaries (compiled once per session with gcc -static),
a weak-sandbox runner for positive controls on the host, and helpers to run an attack in a
sandbox and parse its JSON lines.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
E2E = REPO / "tests" / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))


def _load_e2e_conftest():
    name = "warren_e2e_conftest"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, E2E / "conftest.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


_e2e = _load_e2e_conftest()

# Re-exported fixtures and hook (names with underscores are not covered by `import *`).
server = _e2e.server
image = _e2e.image
sandboxes = _e2e.sandboxes
_server_alive = _e2e._server_alive
pytest_runtest_makereport = _e2e.pytest_runtest_makereport
safe_rmtree = _e2e.safe_rmtree

import e2e_util as u  # noqa: E402

ATTACK_SRC = HERE / "attack.c"
PROBE_SRC = REPO / "tests" / "probe" / "probe.c"
IN_SANDBOX_ATTACK = "/usr/local/bin/attack"
IN_SANDBOX_PROBE = "/usr/local/bin/probe"


# --------------------------------------------------------------------------
# binaries
# --------------------------------------------------------------------------
def _gcc_static(src: Path, out: Path) -> None:
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.fail("gcc not found (apt-get install gcc libc6-dev)")
    r = subprocess.run([gcc, "-static", "-O2", "-Wall", "-o", str(out), str(src)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"gcc -static {src} failed:\n{r.stderr}")


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("security-bin")
    os.chmod(d, 0o755)  # the weak-sandbox controls run as nobody
    return d


@pytest.fixture(scope="session")
def attack_bin(bin_dir) -> Path:
    out = bin_dir / "attack"
    _gcc_static(ATTACK_SRC, out)
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="session")
def probe_bin(bin_dir) -> Path:
    out = bin_dir / "probe"
    _gcc_static(PROBE_SRC, out)
    os.chmod(out, 0o755)
    return out


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------
def parse_results(stdout: str) -> List[dict]:
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def pick(results: Iterable[dict], attack: str, **match) -> List[dict]:
    return [r for r in results
            if r.get("attack") == attack and all(r.get(k) == v for k, v in match.items())]


def one(results: Iterable[dict], attack: str, **match) -> dict:
    found = pick(results, attack, **match)
    assert found, f"no result for {attack} {match or ''} in {list(results)!r}"
    return found[0]


def denied(r: dict, errnos=("EPERM",)) -> bool:
    return r.get("ret", 0) < 0 and (r.get("errno") in errnos or "child_signal" in r)


# --------------------------------------------------------------------------
# positive controls: the same attack on the host in a weak sandbox
# --------------------------------------------------------------------------
WEAK = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
        "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net",
        "--ipc", "--uts", "--mount-proc"]


@pytest.fixture(scope="session")
def weak(attack_bin):
    """Run ``attack SUBCOMMAND`` on the host inside a weak sandbox: an unprivileged user
    (nobody) in fresh user/mount/pid/net namespaces with no seccomp, Landlock or capability
    drop.  This is what the sandbox would look like without Warren's controls; an attack that
    also fails here cannot tell us whether the control works (the tests say so)."""
    cache: Dict[tuple, List[dict]] = {}

    def run(*args: str, timeout: float = 60) -> List[dict]:
        key = tuple(args)
        if key not in cache:
            r = subprocess.run(WEAK + [str(attack_bin), *args], capture_output=True, text=True,
                               timeout=timeout, cwd="/tmp")
            cache[key] = parse_results(r.stdout)
        return cache[key]
    return run


# --------------------------------------------------------------------------
# sandboxes
# --------------------------------------------------------------------------
class Sandbox:
    """A sandbox made through the HTTP API, with the attack and probe binaries inside."""

    def __init__(self, server, sid: str):
        self.server = server
        self.id = sid

    def exec(self, argv: List[str], timeout_s: float = 60, http_timeout: Optional[float] = None,
             **extra) -> dict:
        body = {"argv": argv, "timeout_s": timeout_s}
        body.update(extra)
        r = self.server.http("POST", f"/v1/sandboxes/{self.id}/exec", body,
                             timeout=http_timeout or timeout_s + 60)
        assert r.status == 200, f"exec {argv!r} in {self.id}: {r!r}"
        return r.json

    def sh(self, cmd: str, timeout_s: float = 60, **extra) -> dict:
        return self.exec(["/bin/sh", "-c", cmd], timeout_s=timeout_s, **extra)

    def attack(self, *args: str, timeout_s: float = 60, **extra) -> List[dict]:
        res = self.exec([IN_SANDBOX_ATTACK, *args], timeout_s=timeout_s, **extra)
        self.last = res
        return parse_results(res.get("stdout") or "")

    def probe(self) -> dict:
        res = self.exec([IN_SANDBOX_PROBE], timeout_s=30)
        assert res["exit_code"] == 0, f"probe failed in the sandbox: {res!r}"
        return json.loads(res["stdout"])

    def put(self, path: str, data: bytes, mode: str = "0644", timeout: float = 60):
        from urllib.parse import quote
        return self.server.http("PUT", f"/v1/sandboxes/{self.id}/files?path={quote(path)}&mode={mode}",
                                data, timeout=timeout)

    def get(self, path: str, timeout: float = 60):
        from urllib.parse import quote
        return self.server.http("GET", f"/v1/sandboxes/{self.id}/files?path={quote(path)}",
                                timeout=timeout)

    def alive(self) -> bool:
        """The agent still serves commands."""
        try:
            res = self.exec(["/bin/echo", "still-here"], timeout_s=20, http_timeout=40)
        except (AssertionError, OSError):
            return False
        return res.get("exit_code") == 0 and res.get("stdout") == "still-here\n"


@pytest.fixture
def make_sandbox(server, image, sandboxes, attack_bin, probe_bin):
    """make_sandbox(**spec) -> Sandbox with /usr/local/bin/{attack,probe}; deleted after the test."""
    attack_data = attack_bin.read_bytes()
    probe_data = probe_bin.read_bytes()

    def make(install: bool = True, **spec) -> Sandbox:
        body = {"image": image}
        body.update(spec)
        r = server.http("POST", "/v1/sandboxes", body, timeout=120)
        assert r.status == 201, f"create {body!r}: {r!r}"
        sb = Sandbox(server, r.json["id"])
        sandboxes.append(sb.id)
        if install:
            res = sb.exec(["/bin/mkdir", "-p", "/usr/local/bin"], timeout_s=20)
            assert res["exit_code"] == 0, res
            for path, data in ((IN_SANDBOX_ATTACK, attack_data), (IN_SANDBOX_PROBE, probe_data)):
                w = sb.put(path, data, mode="0755")
                assert w.status == 204, f"upload {path}: {w!r}"
        return sb
    return make


@pytest.fixture(scope="module")
def shared_sb(server, image, attack_bin, probe_bin):
    """One sandbox for the non-destructive syscall attacks of a module."""
    r = server.http("POST", "/v1/sandboxes", {"image": image}, timeout=120)
    assert r.status == 201, r
    sb = Sandbox(server, r.json["id"])
    try:
        assert sb.exec(["/bin/mkdir", "-p", "/usr/local/bin"], timeout_s=20)["exit_code"] == 0
        for path, b in ((IN_SANDBOX_ATTACK, attack_bin), (IN_SANDBOX_PROBE, probe_bin)):
            w = sb.put(path, b.read_bytes(), mode="0755")
            assert w.status == 204, w
        yield sb
    finally:
        server.http("DELETE", "/v1/sandboxes/" + sb.id, timeout=60)


def server_rss_kb(server) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def healthy(server, timeout: float = 10) -> bool:
    try:
        r = u.http_request(server, "GET", "/healthz", auth=False, timeout=timeout)
        return r.status == 200 and server.proc.poll() is None
    except OSError:
        return False
