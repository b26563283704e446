"""The real `e2b` npm package (2.51.0, tests/e2b/package-lock.json) against `warren serve`'s
E2B-compatible API (issue 31, docs/e2b.md).

The tests themselves are JavaScript (tests/e2b/sdk.test.mjs, `node --test`); this module gives
them a server and the image the SDK asks for by default ("base" = `base:latest`: the busybox
rootfs plus /bin/bash, which the SDK runs every command with), runs them and checks that no
sandbox they made outlives them. Node.js >= 20.18.1 and tests/e2b/node_modules are required
(scripts/install-deps.sh installs both): without them this fails, it never skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

import e2e_util as u
from conftest import REPO, _build_rootfs, _scratch_base, safe_rmtree

pytestmark = pytest.mark.serve_only("the E2B-compatible API is served by `warren serve` (issue 31)")

E2B_DIR = REPO / "tests" / "e2b"
BASE_IMAGE = "base:latest"  # the SDK's default template, "base", is NAME without a tag
NODE_MIN = (20, 18, 1)  # e2b's undici 7 needs it (package.json engines); Debian 12's nodejs is 18
E2B_VERSION = "2.51.0"
RUN_TIMEOUT_S = 300

# What the SDK runs: `/bin/bash -l -c CMD` (commands) and `/bin/bash -i -l` (PTY). Debian's
# busybox has no `bash` applet, so a symlink to busybox would answer "applet not found":
# a wrapper that runs busybox's sh with the same arguments.
BASH_WRAPPER = '#!/bin/sh\nexec /bin/busybox sh "$@"\n'


def _node() -> str:
    node = shutil.which("node")
    if not node:
        pytest.fail("node not found: the E2B SDK tests need Node.js >= "
                    f"{'.'.join(map(str, NODE_MIN))} (scripts/install-deps.sh installs it)")
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)", out)
    if not m or tuple(map(int, m.groups())) < NODE_MIN:
        pytest.fail(f"{node} is Node.js {out or '(no version)'}; the e2b SDK needs >= "
                    f"{'.'.join(map(str, NODE_MIN))} (Debian 12's own nodejs is too old)")
    return node


def _check_node_modules() -> None:
    pkg = E2B_DIR / "node_modules" / "e2b" / "package.json"
    if not pkg.is_file():
        pytest.fail(f"{pkg} is missing: run `npm ci --prefix tests/e2b` "
                    "(scripts/install-deps.sh does)")
    got = json.loads(pkg.read_text()).get("version")
    if got != E2B_VERSION:
        pytest.fail(f"tests/e2b/node_modules has e2b {got}, the lockfile pins {E2B_VERSION}: "
                    "run `npm ci --prefix tests/e2b`")


@pytest.fixture(scope="module")
def base_image(server):
    """`base:latest`: conftest's busybox rootfs plus /bin/bash (see BASH_WRAPPER)."""
    layers = {f'{l["name"]}:{l["tag"]}' for l in server.http("GET", "/v1/layers").json["layers"]}
    if BASE_IMAGE in layers:  # this module built it already against this server
        yield BASE_IMAGE
        return
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-e2b-rootfs-", dir=_scratch_base()))
    try:
        _build_rootfs(root)
        bash = root / "bin" / "bash"
        bash.write_text(BASH_WRAPPER)
        os.chmod(bash, 0o755)
        r = server.cli("image", "build", BASE_IMAGE, "--from-dir", str(root), timeout=300)
        assert r.returncode == 0, (f"warren image build {BASE_IMAGE} --from-dir {root} failed "
                                   f"({r.returncode}):\nstdout: {r.stdout}\nstderr: {r.stderr}")
        yield BASE_IMAGE
    finally:
        safe_rmtree(str(root))


def _e2b_env(server, run: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "WARREN_"))}
    env.update({
        "E2B_API_URL": server.url,      # the control plane and the sandboxes' daemon protocol
        "E2B_SANDBOX_URL": server.url,  # are on the one listener
        "E2B_API_KEY": server.token,
        "WARREN_E2B_RUN": run,          # metadata on every sandbox the tests make
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        "NODE_OPTIONS": "",
    })
    return env


def _run_node(argv: list, env: dict, timeout: float) -> tuple:
    """(returncode or None on timeout, combined output); on timeout the whole process group
    (node --test runs each file in a child) is killed."""
    p = subprocess.Popen(argv, cwd=str(REPO), env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out.decode("utf-8", "replace")


def _leftovers(server, run: str) -> list:
    """Sandboxes (Warren's own API) that carry this run's tag in any label: a sandbox the
    tests made and did not kill."""
    r = server.http("GET", "/v1/sandboxes", timeout=60)
    assert r.status == 200, r
    return [sb for sb in r.json.get("sandboxes", [])
            if any(run in str(v) for v in (sb.get("labels") or {}).values())
            and sb.get("state") not in ("deleted", "stopping")]


@pytest.fixture(scope="module")
def node():
    """The node binary, checked (version, tests/e2b/node_modules) before anything is built."""
    path = _node()
    _check_node_modules()
    return path


def test_e2b_js_sdk(node, server, base_image):
    run = u.unique("e2b")
    argv = [node, "--test", "--test-force-exit", "--test-reporter=spec", "tests/e2b/"]
    rc, out = _run_node(argv, _e2b_env(server, run), RUN_TIMEOUT_S)
    left = _leftovers(server, run)
    for sb in left:
        server.http("DELETE", "/v1/sandboxes/" + sb["id"], timeout=60)
    tail = out[-30000:]
    assert rc is not None, f"`{' '.join(argv)}` did not finish in {RUN_TIMEOUT_S}s; its output:\n{tail}"
    assert rc == 0, f"`{' '.join(argv)}` exited with {rc}; its output:\n{tail}"
    assert not left, f"the E2B tests left sandboxes running: {[sb['id'] for sb in left]}"
    print(out)  # the spec report, for `pytest -s`
