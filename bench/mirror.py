#!/usr/bin/python3
"""The package mirror at fleet scale (issue 33): time and upstream bytes of the same install
in a cold and then a warm fleet, for npm, pip and apt, with 1, 10 and 50 sandboxes installing
at once, through Warren's egress proxy and through the two anchors:

  direct   the sandboxes install straight from the registry (an address rule, through NAT;
           no proxy): what every install costs without a mirror;
  squid    the sandboxes install through Debian's squid (a dedicated caching proxy, with
           collapsed forwarding and the same 60 s freshness for metadata), in front of the
           registry: what a mirror an operator sets up by hand gives;
  warren   the sandboxes install through the node's egress proxy and its package cache, as
           every egress sandbox does.

Each (registry, clients, path) has packages of its own, so its first round is cold; the
second round runs in fresh sandboxes (no client-side cache) and is the warm fleet. Upstream
bytes are what the registry sent (its own count). The registries are plain HTTP (squid can
cache them; Warren caches HTTPS the same way once TLS is opened) and run in a network
namespace the benchmark makes (10.253.0.2; squid at .3); nothing else is contacted. Builds a
Debian image with pip and npm (mmdebstrap: needs the Debian archive) and starts its own
`warren serve` (build/warren). Root, Debian's /usr/bin/python3.

  sudo /usr/bin/python3 bench/mirror.py [--clients 1,10,50] [--only npm,pip,apt]
                                        [--paths direct,squid,warren] [--json out.json]
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from benchlib import BenchError, WarrenServe, log  # noqa: E402
import package_registries as registries  # noqa: E402

NS, VETH, NET = "wb-mirror", "wbmir0", "10.253.0"
REGISTRY, SQUID = f"{NET}.2", f"{NET}.3"
NPM, PYPI, DEB = "npm.bench.test", "pypi.bench.test", "deb.bench.test"
IMAGE = "bench-mirror:1"
FRESH_S = 60


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def install_script(registry, prefix, path):
    """The client's command for `prefix`'s packages; `path` says how it reaches the registry."""
    proxy = {"direct": "", "squid": f"http://{SQUID}:3128", "warren": None}[path]
    env = "" if proxy is None else (
        f"export http_proxy={proxy} https_proxy={proxy} HTTP_PROXY={proxy} HTTPS_PROXY={proxy} "
        f"npm_config_proxy={proxy} npm_config_https_proxy={proxy}; ")
    if registry == "npm":
        return (env + f"mkdir -p /tmp/app && cd /tmp/app && npm install --registry http://{NPM}/ "
                f"--no-audit --no-fund --no-update-notifier --loglevel=error {prefix}-0")
    if registry == "pip":
        return (env + "python3 -m pip install -q --no-cache-dir --disable-pip-version-check "
                f"--index-url http://{PYPI}/simple/ --trusted-host {PYPI} --target /tmp/site {prefix}-a")
    apt_proxy = "" if proxy is None else f"-o Acquire::http::Proxy={proxy or 'DIRECT'} "
    return ("rm -f /etc/apt/sources.list.d/* && "
            f"echo 'deb [trusted=yes] http://{DEB}/debian-{prefix} bookworm main' > /etc/apt/sources.list && "
            f"apt-get {apt_proxy}update -q && "
            f"apt-get {apt_proxy}install -y -q --no-install-recommends {prefix}-hello")


class Registry:
    """The registries' namespace and server, and squid beside them."""

    def __init__(self, scratch, squid):
        self.root = Path(tempfile.mkdtemp(prefix="warren-bench-registry-", dir=scratch))
        self.www = self.root / "www"
        self.www.mkdir()
        self.log = self.root / "requests.log"
        self.log.write_text("")
        self.proc = self.squid = None
        try:
            self.setup(squid)
        except BaseException:
            self.close()
            raise

    def setup(self, squid):
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS)
        sh("ip", "addr", "add", f"{NET}.1/24", "dev", VETH)
        sh("ip", "link", "set", VETH, "up")
        for ip in (REGISTRY, SQUID):
            sh("ip", "-n", NS, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", NS, "link", "set", "eth0", "up")
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        sh("ip", "-n", NS, "route", "add", "default", "via", f"{NET}.1")
        self.hosts = self.root / "hosts"
        self.hosts.write_text("".join(f"{REGISTRY} {h}\n" for h in (NPM, PYPI, DEB)))
        if squid:
            self.start_squid()

    def serve(self):
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", NS, "/usr/bin/python3", str(REPO / "tests/e2e/mirror_upstream.py"),
             str(self.www), str(self.log), REGISTRY, "-", "-"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise BenchError("the registry did not start: " + self.proc.stdout.read())

    def start_squid(self):
        # squid drops to the proxy user: its cache, logs and pid in a directory of that user's.
        os.chmod(self.root, 0o755)
        home = self.root / "squid"
        cache = home / "cache"
        cache.mkdir(parents=True)
        for p in (home, cache):
            shutil.chown(p, "proxy", "proxy")
        conf = self.root / "squid.conf"
        conf.write_text(f"""
http_port {SQUID}:3128
acl all_src src all
http_access allow all_src
cache_dir ufs {cache} 2000 16 256
maximum_object_size 256 MB
collapsed_forwarding on
refresh_pattern -i \\.(deb|whl|tgz)$ 1440 100% 10080
refresh_pattern . 1 100% 1
pid_filename {home}/squid.pid
cache_log {home}/cache.log
access_log {home}/access.log
cache_effective_user proxy
hosts_file {self.hosts}
dns_nameservers 127.0.0.1
""")
        sh("ip", "netns", "exec", NS, "squid", "-z", "-N", "-f", str(conf))
        self.squid = subprocess.Popen(["ip", "netns", "exec", NS, "squid", "-N", "-f", str(conf)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for _ in range(100):
            if sh("ip", "netns", "exec", NS, "bash", "-c", f"exec 3<>/dev/tcp/{SQUID}/3128", check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise BenchError("squid did not start: see " + str(home / "cache.log"))

    def sent_bytes(self):
        f = Path(str(self.log) + ".bytes")
        return sum(int(l.split()[1]) for l in f.read_text().splitlines()) if f.exists() else 0

    def close(self):
        for p in (self.proc, self.squid):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        sh("ip", "link", "del", VETH, check=False)
        sh("ip", "netns", "del", NS, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def round_of(serve, registry, script, n):
    """`script` in `n` fresh sandboxes at once: the wall time of the installs."""
    allow = [f"{NPM}:80/tcp", f"{PYPI}:80/tcp", f"{DEB}:80/tcp", f"{REGISTRY}/32:80/tcp", f"{SQUID}/32:3128/tcp"]
    boxes = [serve.http("POST", "/v1/sandboxes", {"image": IMAGE, "network": {"mode": "egress", "allow": allow}})["id"]
             for _ in range(n)]
    before = registry.sent_bytes()

    def run(sid):
        r = serve.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", script], "timeout_s": 1800},
                       timeout=1900)
        if r.get("exit_code") != 0:
            raise BenchError(f"install failed in {sid}: {r.get('stderr', '')[-1500:]}")

    t0 = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            list(pool.map(run, boxes))
        took = time.monotonic() - t0
    finally:
        for sid in boxes:
            serve.http("DELETE", f"/v1/sandboxes/{sid}")
    time.sleep(0.5)  # the registry logs each body once it is sent
    return took, registry.sent_bytes() - before


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--clients", default="1,10,50")
    ap.add_argument("--only", default="npm,pip,apt")
    ap.add_argument("--paths", default="direct,squid,warren")
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/mirror.py: run as root")
    clients = [int(c) for c in args.clients.split(",")]
    kinds, paths = args.only.split(","), args.paths.split(",")
    if "squid" in paths and not shutil.which("squid"):
        raise SystemExit("bench/mirror.py: the squid anchor needs Debian's squid (apt-get install squid), "
                         "or leave it out with --paths direct,warren")
    scratch = "/var/tmp"
    registry = None
    serve = None
    rows = []
    try:
        registry = Registry(scratch, "squid" in paths)
        # Every (registry, clients, path) has packages of its own: its first round is cold.
        for kind in kinds:
            for n in clients:
                for path in paths:
                    prefix = f"b{kind}{n}{path}"
                    if kind == "npm":
                        registries.npm_tree(registry.www, f"http://{NPM}", prefix, 15)
                    elif kind == "pip":
                        registries.pypi_tree(registry.www, f"http://{PYPI}", prefix)
                    else:
                        registries.apt_repo(registry.www, prefix, f"debian-{prefix}")
        registry.serve()
        serve = WarrenServe(str(REPO / "build/warren"), scratch, "mirror",
                            ["--dns-hosts", str(registry.hosts), "--proxy-fresh", str(FRESH_S)])
        log("building the Debian image with pip and npm (mmdebstrap)...")
        serve.cli("image", "build", IMAGE, "--debian", "bookworm", "--packages", "python3-pip,nodejs,npm")
        for n in clients:  # the small bursts of every registry first
            for kind in kinds:
                for path in paths:
                    script = install_script(kind, f"b{kind}{n}{path}", path)
                    cold = round_of(serve, registry, script, n)
                    warm = round_of(serve, registry, script, n)
                    row = {"registry": kind, "clients": n, "path": path,
                           "cold_s": cold[0], "cold_upstream_bytes": cold[1],
                           "warm_s": warm[0], "warm_upstream_bytes": warm[1]}
                    rows.append(row)
                    log(json.dumps(row))
    finally:
        if serve is not None:
            serve.delete_all()
            serve.stop()
        if registry is not None:
            registry.close()
    print(f"\n{'registry':8} {'clients':>7} {'path':7} {'cold s':>8} {'cold MB up':>10} "
          f"{'warm s':>8} {'warm MB up':>10} {'warm/cold bytes':>15}")
    for r in rows:
        ratio = r["warm_upstream_bytes"] / r["cold_upstream_bytes"] if r["cold_upstream_bytes"] else 0
        print(f"{r['registry']:8} {r['clients']:>7} {r['path']:7} {r['cold_s']:8.2f} "
              f"{r['cold_upstream_bytes'] / 1e6:10.2f} {r['warm_s']:8.2f} "
              f"{r['warm_upstream_bytes'] / 1e6:10.2f} {ratio:15.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
