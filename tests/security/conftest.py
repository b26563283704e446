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
for _p in (E2E, HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


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
from sec_util import IN_SANDBOX_ATTACK, IN_SANDBOX_PROBE, Sandbox, parse_results  # noqa: E402

ATTACK_SRC = HERE / "attack.c"
PROBE_SRC = REPO / "tests" / "probe" / "probe.c"


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
def bin_dir() -> Path:
    # Not under pytest's tmp dir (mode 0700): the weak-sandbox controls run as nobody.
    d = Path(tempfile.mkdtemp(prefix="warren-sec-bin-", dir="/var/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


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
# positive controls: the same attack on the host in a weak sandbox
# --------------------------------------------------------------------------
WEAK = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
        "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net",
        "--ipc", "--uts", "--mount-proc", "--",
        # a private /tmp, so the attack's scratch files never touch the host's
        "/bin/sh", "-c", 'mount -t tmpfs -o size=64m,mode=1777 weak-tmp /tmp && cd /tmp && exec "$0" "$@"']


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
                               timeout=timeout, cwd="/")
            assert r.returncode == 0, f"weak-sandbox control failed to run: {r.stderr}"
            cache[key] = parse_results(r.stdout)
        return cache[key]
    return run


# --------------------------------------------------------------------------
# sandboxes
# --------------------------------------------------------------------------
@pytest.fixture
def make_sandbox(server, image, sandboxes, attack_bin, probe_bin):
    """make_sandbox(**spec) -> Sandbox with /usr/local/bin/{attack,probe}; deleted after the test."""
    attack_data = attack_bin.read_bytes()
    probe_data = probe_bin.read_bytes()

    def make(install: bool = True, cli: bool = False, **spec) -> Sandbox:
        if cli:  # through `warren create` instead of the HTTP API
            flags = ["create", "--image", spec.pop("image", image)]
            for key, flag, fmt in (("pids", "--pids", "{}"), ("memory_mb", "--memory", "{}M"),
                                   ("disk_mb", "--disk", "{}M"), ("cpu", "--cpu", "{}")):
                if key in spec:
                    flags += [flag, fmt.format(spec.pop(key))]
            assert not spec, f"make_sandbox(cli=True) cannot pass {spec}"
            r = server.cli(*flags, timeout=120)
            assert r.returncode == 0, f"warren {' '.join(flags)}: {r.stderr}"
            sid = r.stdout.strip().splitlines()[-1].strip()
        else:
            body = {"image": image}
            body.update(spec)
            r = server.http("POST", "/v1/sandboxes", body, timeout=120)
            assert r.status == 201, f"create {body!r}: {r!r}"
            sid = r.json["id"]
        sb = Sandbox(server, sid)
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


# When tests/e2e and tests/security run in one pytest invocation, pytest leaves whichever
# conftest it imported last as sys.modules["conftest"], and tests/e2e/test_two_servers.py does
# `import conftest` to reach Server, _scratch_base and _free_port.  Expose every name of the
# e2e conftest here too (ours take precedence), so that import works whichever module it gets.
for _name, _value in vars(_e2e).items():
    if not _name.startswith("__") and _name not in globals():
        globals()[_name] = _value
del _name, _value
