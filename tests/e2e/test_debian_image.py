"""`warren image build --debian SUITE --packages ...`: a real Debian userland via mmdebstrap
(fetched from the Debian archive, the one outside source this machine may use)."""

from __future__ import annotations

import pytest

DEB = "e2e-debian-py:1"


@pytest.fixture(scope="module")
def debian_image(server):
    r = server.cli("image", "build", DEB, "--debian", "bookworm", "--packages", "python3,git",
                   timeout=1200)
    assert r.returncode == 0, f"debian build failed ({r.returncode}):\n{r.stderr[-4000:]}"
    # Progress went to stderr, the result line to stdout.
    assert r.stdout.startswith(DEB + " sha256:")
    assert "mmdebstrap" in r.stderr
    yield DEB
    server.cli("image", "rm", DEB)


def test_python3_runs_in_a_debian_base(server, debian_image):
    r = server.cli("run", "--image", debian_image, "--", "python3", "-c", "print(1)")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"


def test_debian_userland_is_real(server, debian_image):
    r = server.cli("run", "--image", debian_image, "--", "sh", "-c",
                   ". /etc/os-release; echo $VERSION_CODENAME; git --version; "
                   "dpkg -s python3 | grep '^Status'; id -u")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "bookworm"
    assert lines[1].startswith("git version ")
    assert lines[2] == "Status: install ok installed"
    assert lines[3] == "0"


def test_debian_layer_is_listed_with_its_source(server, debian_image):
    layers = {l["ref"]: l for l in server.http("GET", "/v1/layers").json["layers"]}
    l = layers[debian_image]
    assert l["kind"] == "base" and l["source"] == "debian:bookworm+python3,git"
    assert l["size"] > 50 << 20


def test_python_bytecode_is_not_stale(server, debian_image):
    """File times survive into the layer: Debian's precompiled .pyc files stay valid, so an
    import does not recompile (which would write __pycache__ into the sandbox's upper layer)."""
    r = server.cli("run", "--image", debian_image, "--", "sh", "-c",
                   "touch /tmp/stamp; sleep 1.1; "
                   "python3 -c 'import json, email.parser, unittest' && "
                   "find /usr/lib/python3.11 -newer /tmp/stamp -name '*.pyc' | head -3; "
                   "stat -c %Y /usr/lib/python3.11/json/__init__.py")
    assert r.returncode == 0, r.stderr
    *recompiled, mtime = r.stdout.split()
    assert recompiled == [], f"imports recompiled bytecode: {recompiled}"
    assert int(mtime) > 1_600_000_000, "file mtimes were flattened"


@pytest.mark.parametrize("args,why", [
    (["--debian", "bookworm", "--packages", "bad;name"], "bad Debian package name"),
    (["--debian", "../etc"], "a Debian suite is a name"),
    (["--from-dir", "/", "--packages", "python3"], "--packages goes with --debian"),
    (["--from-dir", "/", "--desktop"], "so does --desktop"),
    (["--packages", "python3"], "exactly one of"),
])
def test_bad_debian_requests_fail_clearly(server, args, why):
    r = server.cli("image", "build", "e2e-bad-deb:1", *args)
    assert r.returncode != 0
    assert r.stderr.startswith("warren: ") and why in r.stderr, r.stderr
