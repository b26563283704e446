"""End-to-end fixtures: a real `warren serve` on a loopback port and a busybox image.

Run as root:  /usr/bin/python3 -m pytest -q tests/e2e
WARREN_BIN    the warren binary (default: build/warren under the repository root)
WARREN_E2E_TMP  where data dirs and rootfs trees go (default /var/tmp; must not be tmpfs)
WARREN_E2E_TARGET  `serve` (default) or `cluster`: the same tests against a cluster on this
                machine (etcd, 3 `warren node`s, 2 `warren apiserver`s; the tests talk to the
                first API server, the CLI and SDK too). scripts/test.sh runs the contract's
                modules both ways.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "sdk" / "python"
if str(SDK) not in sys.path:
    sys.path.insert(0, str(SDK))

import e2e_util  # noqa: E402  (tests/e2e is on sys.path: rootdir-relative conftest)

IMAGE = "t:1"

# Test hosts of the network tests (test_network.py): a network namespace that module makes,
# at NET_UPSTREAM.2 and .3, which the server's --dns-hosts file names. Never anything outside
# this machine.
NET_UPSTREAM = "10.251.0"
# The same namespace's IPv6 network (unique-local, routed from the host only): the proxy's
# IPv6 egress, to a name with only an IPv6 address.
NET_UPSTREAM6 = "fd77:251:0"
NET_HOSTS = {
    "pkg.test": f"{NET_UPSTREAM}.2", "deb.debian.org": f"{NET_UPSTREAM}.2", "a.wild.test": f"{NET_UPSTREAM}.2",
    "other.test": f"{NET_UPSTREAM}.3",
    "loop.wild.test": "127.0.0.1", "meta.wild.test": "169.254.169.254",  # what a proxy must never reach
    "v6.test": f"{NET_UPSTREAM6}::2",
    "loop6.wild.test": "::1", "mapped6.wild.test": "::ffff:169.254.169.254",  # never, in IPv6
}
# The HTTPS package-cache tests (test_https_cache.py) have their own namespace: TLS servers at
# TLS_UPSTREAM.2 (certificates from the test CA, which the server's --proxy-upstream-ca
# trusts) and .3 (a certificate nobody trusts). The server intercepts TLS_INTERCEPT.
TLS_UPSTREAM = "10.251.1"
NET_HOSTS.update({
    "pypi.test": f"{TLS_UPSTREAM}.2", "files.test": f"{TLS_UPSTREAM}.2", "npm.test": f"{TLS_UPSTREAM}.2",
    "passthrough.test": f"{TLS_UPSTREAM}.2", "untrusted.test": f"{TLS_UPSTREAM}.3",
})
TLS_INTERCEPT = "pypi.test,files.test,npm.test,untrusted.test"
# The package-mirror tests (test_package_mirror.py): a registry host for npm, PyPI (both over
# HTTPS, intercepted) and apt (plain HTTP) in a namespace of their own, at MIRROR_UPSTREAM.2.
MIRROR_UPSTREAM = "10.251.2"
MIRROR_HOSTS = ("npm.mirror.test", "pypi.mirror.test", "deb.mirror.test")
NET_HOSTS.update({name: f"{MIRROR_UPSTREAM}.2" for name in MIRROR_HOSTS})
TLS_INTERCEPT += ",npm.mirror.test,pypi.mirror.test"
# How long the server serves registry metadata without asking upstream (--proxy-fresh): short,
# so a test can see a change upstream after it, long enough that an install fits inside it.
PROXY_FRESH_S = 12


def make_test_ca(directory: str) -> dict:
    """A CA for the test hosts' TLS servers (openssl), as a real package host's would be."""
    key, crt = os.path.join(directory, "test-ca.key"), os.path.join(directory, "test-ca.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=warren e2e upstream CA",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"],
                   check=True, capture_output=True)
    return {"key": key, "crt": crt}


def make_test_leaf(directory: str, name: str, sans: list, ca) -> tuple:
    """A server certificate for `sans` (typed entries: "DNS:host", "IP:addr"), from `ca` (a
    make_test_ca result), or self-signed when `ca` is None. Returns (crt, key) paths."""
    key, csr, crt, ext = (os.path.join(directory, f"{name}.{x}") for x in ("key", "csr", "crt", "ext"))
    with open(ext, "w") as f:
        f.write("subjectAltName=" + ",".join(sans) + "\nextendedKeyUsage=serverAuth\n")
    cn = sans[0].split(":", 1)[1]
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", csr, "-subj", f"/CN={cn}"], check=True, capture_output=True)
    sign = ["-CA", ca["crt"], "-CAkey", ca["key"], "-CAcreateserial"] if ca else ["-signkey", key]
    subprocess.run(["openssl", "x509", "-req", "-in", csr, *sign, "-out", crt, "-days", "2", "-extfile", ext],
                   check=True, capture_output=True)
    return crt, key


def _warren_bin() -> Path:
    b = Path(os.environ.get("WARREN_BIN") or "build/warren")
    if not b.is_absolute():
        b = REPO / b
    return b


def _fstype(path: str) -> str:
    """The filesystem type of the mount holding ``path``."""
    path = os.path.realpath(path)
    best, fstype = "", "?"
    for line in e2e_util.mountinfo():
        pre, _, post = line.partition(" - ")
        mp = e2e_util._unescape(pre.split()[4])
        if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
            best, fstype = mp, post.split()[0]
    return fstype


def _scratch_base() -> str:
    for cand in (os.environ.get("WARREN_E2E_TMP"), "/var/tmp", str(REPO / "build")):
        if cand and os.path.isdir(cand) and _fstype(cand) not in ("tmpfs", "ramfs"):
            return cand
    pytest.fail("no scratch directory on a disk filesystem (set WARREN_E2E_TMP)")


_free_port = e2e_util.free_port


def safe_rmtree(path: str) -> None:
    """rm -rf, but never through a mount point left behind (lazily unmounted first)."""
    if not os.path.lexists(path):
        return
    for mp in sorted(e2e_util.mount_points_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    left = e2e_util.mount_points_under(path)
    if left:
        print(f"\nwarning: not removing {path}: still mounted: {left}", file=sys.stderr)
        return

    def onerror(func, p, exc_info):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, stat.S_IRWXU) if not os.path.islink(p) else None
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=onerror)


class Server:
    # A cluster (ClusterServer) or `warren serve`: for the few checks whose right answer
    # differs (where a node keeps its files, what cordon answers), never to skip one.
    cluster = False

    def __init__(self, bin_path: Path, data_dir: str, port: int, log_path: str, home: str):
        self.bin = str(bin_path)
        self.data_dir = data_dir
        self.host = "127.0.0.1"
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.home = home
        self.token = ""
        self.crashes: list = []
        self.rootfs = ""
        self.proc: subprocess.Popen = None  # type: ignore
        self.env = {}
        self.extra_args: list = []

    def layer_dir(self) -> str:
        """Where the layer blobs live: DATA_DIR/blobs/sha256/HEX (LayerStore)."""
        return self.data_dir

    def node_data_dir(self, node: str) -> str:
        """The data dir of the node a sandbox's `node` names (its egress CA, its caches)."""
        assert node == "local", node
        return self.data_dir

    # -- process ----------------------------------------------------------
    def start(self) -> None:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir,
             "--fncall-image", RUNNER_IMAGE, *self.extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"warren serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail(f"warren serve did not answer /healthz in 60s:\n{self.log_tail()}")
            time.sleep(0.1)
        tok = os.path.join(self.data_dir, "admin.token")
        while not os.path.exists(tok):
            if time.time() > deadline:
                pytest.fail(f"no {tok} after start:\n{self.log_tail()}")
            time.sleep(0.1)
        mode = stat.S_IMODE(os.stat(tok).st_mode)
        self.token_mode = mode
        with open(tok) as f:
            self.token = f.read().strip()
        assert self.token, "admin.token is empty"
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("WARREN_"):
                del env[k]
        env.update({"WARREN_URL": self.url, "WARREN_TOKEN": self.token, "WARREN_HOME": self.home,
                    "PYTHONPATH": str(SDK) + (os.pathsep + os.environ["PYTHONPATH"]
                                              if os.environ.get("PYTHONPATH") else "")})
        self.env = env

    def ensure_running(self) -> bool:
        """Restart the server (same data dir, port and token) if it died; True if it had died."""
        if self.proc is None or self.proc.poll() is None:
            return False
        rc = self.proc.returncode
        self.crashes.append(rc)
        with open(self.log_path, "ab") as f:
            f.write(f"\n==== e2e: warren serve had exited with {rc}; restarting ====\n".encode())
        self.start()
        return True

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            print("\nwarning: warren serve ignored SIGTERM for 20s; sending SIGKILL", file=sys.stderr)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)

    def log_tail(self, n: int = 60, since: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    # -- clients ----------------------------------------------------------
    def cli(self, *args: str, timeout: float = 180, input=None, env=None) -> subprocess.CompletedProcess:
        """Run the warren CLI against this server; returns the CompletedProcess (text mode)."""
        e = dict(self.env)
        if env:
            e.update(env)
        return subprocess.run([self.bin, *args], env=e, capture_output=True, text=True,
                              timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL)

    def client(self, **kw):
        import warren
        return warren.Client(url=self.url, token=self.token, **kw)

    def http(self, method: str, path: str, body=None, **kw) -> e2e_util.Response:
        return e2e_util.http_request(self, method, path, body, **kw)

    def delete_all_sandboxes(self) -> None:
        try:
            r = self.http("GET", "/v1/sandboxes", timeout=30)
            for sb in r.json.get("sandboxes", []) if r.status == 200 else []:
                self.http("DELETE", "/v1/sandboxes/" + sb["id"], timeout=60)
        except Exception as e:  # best effort at teardown
            print(f"\nwarning: could not clean up sandboxes: {e}", file=sys.stderr)


class ClusterServer(Server):
    """A cluster on this machine behind the same interface as Server: a single-member etcd,
    three `warren node`s (own data dir, port, sandbox subnet; the serve flags the tests need)
    and two `warren apiserver`s over one shared layer directory. `url`, `token`, `proc` and
    the log are the first API server's (the one the tests talk to); `data_dir` is its data
    dir. A restart (ensure_running) starts that API server again, as a replica coming back."""

    cluster = True

    def __init__(self, bin_path: Path, base: str, logs: Path, home: str):
        import cluster_util
        self.cu = cluster_util
        self.base, self.logs = base, logs
        self.etcd = None
        self.nodes: list = []
        self.apis: list = []
        self.shared = tempfile.mkdtemp(prefix="warren-e2e-layers-", dir=base)
        self.dirs = [self.shared]
        data_dir = tempfile.mkdtemp(prefix="warren-e2e-api0-", dir=base)
        super().__init__(bin_path, data_dir, 0, str(logs / "apiserver0.log"), home)

    def start(self) -> None:
        if self.etcd is None:
            self.etcd = self.cu.Etcd(self.base, str(self.logs / "etcd.log"))
            for i in range(3):
                d = tempfile.mkdtemp(prefix=f"warren-e2e-node{i}-", dir=self.base)
                self.dirs.append(d)
                n = self.cu.Node(self.bin, self.etcd, f"e2e-n{i}", d,
                                 str(self.logs / f"node{i}.log"),
                                 ["--layer-store", self.shared, "--no-microvm",
                                  "--fncall-image", RUNNER_IMAGE,
                                  "--net-subnet", f"10.{240 + i}.0.0/16", *self.extra_args])
                n.start()
                self.nodes.append(n)
            second = tempfile.mkdtemp(prefix="warren-e2e-api1-", dir=self.base)
            self.dirs.append(second)
            for i, d in enumerate((self.data_dir, second)):
                # Layers are published chunked: the contract's modules run on nodes that
                # load them on demand through blobfsd.
                a = self.cu.ApiServer(self.bin, self.etcd, d, self.shared,
                                      str(self.logs / f"apiserver{i}.log"), self.home,
                                      extra=["--layer-format", "chunked"])
                self.apis.append(a)
        first = self.apis[0]
        for a in self.apis:
            if a.proc is None or a.proc.poll() is not None:
                a.start()
        self.proc, self.port, self.url = first.proc, first.port, first.url
        self.token = first.token
        self.token_mode = stat.S_IMODE(os.stat(os.path.join(self.data_dir, "admin.token")).st_mode)
        env = dict(first.env)
        env["PYTHONPATH"] = str(SDK) + (os.pathsep + os.environ["PYTHONPATH"]
                                        if os.environ.get("PYTHONPATH") else "")
        self.env = env

    def layer_dir(self) -> str:
        """The shared layer store (every node's --layer-store): blobs/sha256/HEX."""
        return self.shared

    def node_data_dir(self, node: str) -> str:
        for n in self.nodes:
            if n.name == node:
                return n.data_dir
        raise AssertionError(f"no node {node!r} in this cluster")

    def stop(self) -> None:
        for a in self.apis:
            a.stop()
        for n in self.nodes:
            n.stop()
        if self.etcd is not None:
            self.etcd.stop()
        for d in self.dirs:
            safe_rmtree(d)


def _target() -> str:
    t = os.environ.get("WARREN_E2E_TARGET", "serve")
    if t not in ("serve", "cluster"):
        pytest.fail(f"WARREN_E2E_TARGET={t!r}: want serve or cluster")
    return t


_SERVER: "Server | None" = None
# The fncall runner image (built by test_calls.py's fixture; the server names it at start).
RUNNER_IMAGE = "e2e-runner:1"


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    global _SERVER
    b = _warren_bin()
    if not (b.is_file() and os.access(b, os.X_OK)):
        pytest.fail(f"warren binary not found at {b} (build it, or set WARREN_BIN)")
    if os.geteuid() != 0:
        pytest.fail("the end-to-end tests must run as root")
    base = _scratch_base()
    logs = tmp_path_factory.mktemp("warren-server")
    home = str(tmp_path_factory.mktemp("warren-home"))
    if _target() == "cluster":
        srv = ClusterServer(b, base, logs, home)
        data_dir = srv.data_dir
    else:
        data_dir = tempfile.mkdtemp(prefix="warren-e2e-data-", dir=base)
        srv = Server(b, data_dir, _free_port(), str(logs / "server.log"), home)
    hosts = os.path.join(data_dir, "e2e-hosts")
    with open(hosts, "w") as f:
        f.writelines(f"{ip} {name}\n" for name, ip in NET_HOSTS.items())
    # On the server object, not in a module global: tests/security loads this file again as
    # another module, whose globals the tests here would not see.
    srv.test_ca = make_test_ca(data_dir)
    srv.extra_args = ["--dns-hosts", hosts, "--proxy-intercept", TLS_INTERCEPT,
                      "--proxy-upstream-ca", srv.test_ca["crt"], "--proxy-fresh", str(PROXY_FRESH_S)]
    try:
        srv.start()
        _SERVER = srv
        yield srv
    finally:
        _SERVER = None
        if srv.proc is not None and srv.proc.poll() is None:
            srv.delete_all_sandboxes()
        srv.stop()
        safe_rmtree(data_dir)


def _debian_image(server, ref: str, packages: str) -> str:
    """`ref`, built once per server with mmdebstrap (Debian bookworm + `packages`)."""
    layers = {f'{l["name"]}:{l["tag"]}' for l in server.http("GET", "/v1/layers").json["layers"]}
    if ref not in layers:
        r = server.cli("image", "build", ref, "--debian", "bookworm", "--packages", packages, timeout=900)
        assert r.returncode == 0, f"{ref} image build failed:\n{r.stderr[-4000:]}"
    return ref


@pytest.fixture(scope="session")
def tools_image(server):
    """A Debian userland with the real package clients: pip, npm, apt, curl and Node.js
    (test_https_cache.py and test_package_mirror.py share it)."""
    return _debian_image(server, "e2e-tools:1", "python3-pip,curl,nodejs,npm,ca-certificates")


@pytest.fixture(scope="session")
def runner(server):
    """The fncall runner image: a real Debian userland with python3, gcc and g++ (mmdebstrap)."""
    return _debian_image(server, RUNNER_IMAGE, "python3,gcc,g++,libc6-dev")


VM_IMAGE = "e2e-debian-systemd:1"


@pytest.fixture(scope="session")
def vm_image(server):
    """For backend vm: a Debian userland with systemd as its init, and python3 (mmdebstrap)."""
    return _debian_image(server, VM_IMAGE, "systemd-sysv,python3")


def _build_rootfs(root: Path) -> None:
    busybox = shutil.which("busybox", path="/bin:/usr/bin:/sbin:/usr/sbin")
    if not busybox:
        pytest.fail("busybox not found: apt-get install busybox-static")
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "root", "proc", "dev", "sys",
              "var/tmp", "home", "run"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    os.chmod(root / "var/tmp", 0o1777)
    os.chmod(root / "root", 0o700)
    shutil.copy2(busybox, root / "bin/busybox")
    os.chmod(root / "bin/busybox", 0o755)
    listing = subprocess.run([busybox, "--list-full"], capture_output=True, text=True)
    if listing.returncode != 0 or not listing.stdout.strip():
        pytest.fail(f"busybox --list-full failed: {listing.stderr}")
    for rel in listing.stdout.split():
        rel = rel.strip("/")
        if not rel or rel == "bin/busybox":
            continue
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(dst):
            os.symlink("/bin/busybox", dst)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n"
                                     "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (root / "etc/hostname").write_text("sandbox\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (root / "etc/marker").write_text("warren-e2e-rootfs\n")


@pytest.fixture(scope="session")
def image(server):
    """A busybox base image, built through the CLI; its NAME:TAG."""
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-rootfs-", dir=_scratch_base()))
    try:
        _build_rootfs(root)
        r = server.cli("image", "build", IMAGE, "--from-dir", str(root), timeout=300)
        assert r.returncode == 0, (f"warren image build {IMAGE} --from-dir {root} failed "
                                   f"({r.returncode}):\nstdout: {r.stdout}\nstderr: {r.stderr}")
        server.rootfs = str(root)
        yield IMAGE
    finally:
        safe_rmtree(str(root))


@pytest.fixture(autouse=True)
def _server_alive(request):
    """If an earlier test killed the server, restart it so one crash does not fail everything after
    it; the test that crashed it has already failed its own liveness check. Reported as a warning."""
    srv = _SERVER
    if srv is not None and srv.ensure_running():
        import warnings
        warnings.warn(f"warren serve had died (exit {srv.crashes[-1]}) before {request.node.nodeid}; restarted")
    yield


@pytest.fixture
def sandboxes(server):
    """A list to append sandbox ids to; each is deleted after the test, pass or fail."""
    ids: list = []
    yield ids
    for sid in ids:
        sid = getattr(sid, "id", sid)
        try:
            server.http("DELETE", "/v1/sandboxes/" + sid, timeout=60)
        except Exception as e:
            print(f"\nwarning: could not delete sandbox {sid}: {e}", file=sys.stderr)


@pytest.fixture
def tokens(server):
    """make(**fields) -> (name, secret): a token made through POST /v1/tokens (fields: scopes,
    max_sandboxes, ...); every token is revoked after the test."""
    made = []

    def make(**fields):
        name = fields.pop("name", None) or e2e_util.unique("tok")
        r = server.http("POST", "/v1/tokens", dict(name=name, **fields))
        assert r.status == 201, r
        made.append(name)
        return name, r.json["token"]

    yield make
    for name in made:
        server.http("DELETE", "/v1/tokens/" + name)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serve_only(why): checks what only `warren serve` has (its data dir, its "
        "SQLite, its node's details) or a feature a cluster does not serve yet; not run against "
        "a cluster (WARREN_E2E_TARGET=cluster), which lists each one with `why`")
    config.addinivalue_line(
        "markers", "cluster_only(why): checks what only a cluster has (several nodes); run in "
        "the suite's cluster pass, deselected (and listed) against `warren serve`")


def pytest_collection_modifyitems(config, items):
    """Against a cluster, the serve_only tests are deselected (and listed), not skipped: they
    run against `warren serve` in the same suite; against `warren serve`, the cluster_only
    ones, which run in the suite's cluster pass."""
    marker = "serve_only" if os.environ.get("WARREN_E2E_TARGET", "serve") == "cluster" else "cluster_only"
    keep, gone = [], []
    for it in items:
        m = it.get_closest_marker(marker)
        if m:
            gone.append(it)
            print(f"\n{marker.replace('_', ' ')}: {it.nodeid}: {m.args[0] if m.args else ''}", file=sys.stderr)
        else:
            keep.append(it)
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    srv = _SERVER
    if srv is None:
        return
    if call.when == "setup":
        item._warren_log_start = srv.log_size()
    elif rep.failed:
        start = getattr(item, "_warren_log_start", 0)
        tail = srv.log_tail(80, since=start)
        if tail.strip():
            rep.sections.append(("warren serve log during this test (tail)", tail))
