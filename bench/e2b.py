#!/usr/bin/python3
"""The E2B SDK's create -> first command -> kill loop against `warren serve`, next to the same
loop through Warren's own Python SDK, on the same server in the same run (issue 31: the E2B
path within 1.5x of Warren's own SDK).

  e2b     the real `e2b` npm package (2.51.0, tests/e2b/node_modules) in one node process
          (bench/e2b_loop.mjs): `Sandbox.create()` (template "base") -> `sbx.commands.run('echo
          hi')` (stdout checked) -> `sbx.kill()`, with E2B_API_URL = E2B_SANDBOX_URL = the
          server, E2B_API_KEY = its admin token.
  warren  sdk/python: `client.create(image="base:latest")` -> `sb.run("echo hi")` (stdout
          checked) -> `sb.delete()`, one keep-alive connection.

Both are sequential, one sandbox at a time; the two loops alternate iteration by iteration
(--order interleaved, the default) so that drift in what else the machine does hits both alike;
--order sequential runs all of one, then all of the other. Each loop first runs --warmup
iterations that are not counted (connections, JIT, the warm pool's first fill). Printed per
loop: the whole iteration, the create, the first command and the kill/delete, p50/p99/mean ms;
the E2B/Warren ratio of the p50s against the target (1.5x); E2B's published time-to-interactive
(p50 ~0.5 s, their cloud) for scale; how many creates the server's warm pool served.

Starts its own `warren serve` (build/warren, a free loopback port, a scratch data dir under
/var/tmp, --no-microvm --no-network: E2B's default is no internet, so both loops make network
`none` sandboxes) and builds `base:latest` (busybox, /bin/bash a wrapper running busybox sh:
the SDK runs every command with /bin/bash -l -c). Everything goes at the end, whatever happens.
Root, Debian's /usr/bin/python3, Node.js >= 20.18.1 and `npm ci --prefix tests/e2b`.

  sudo /usr/bin/python3 bench/e2b.py [--iterations 50] [--warmup 3] [--json out.json]   # ~5 s
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
from benchlib import BenchError, Stopped, WarrenServe, _raise_stopped, log, percentile  # noqa: E402

import warren  # noqa: E402  (sdk/python)

E2B_DIR = os.path.join(REPO, "tests", "e2b")
LOOP_JS = os.path.join(REPO, "bench", "e2b_loop.mjs")
IMAGE = "base:latest"  # the SDK's default template "base"
E2B_VERSION = "2.51.0"
NODE_MIN = (20, 18, 1)
BASH_WRAPPER = '#!/bin/sh\nexec /bin/busybox sh "$@"\n'  # busybox has no bash applet
TARGET_RATIO = 1.5
E2B_ANCHOR_MS = 500.0  # E2B's published time-to-interactive p50 (~0.5 s), on their cloud
# The SDKs' loops, and the same calls on the wire without either SDK (the server's share).
LOOPS = ("e2b", "warren", "e2b_wire", "warren_wire")
STEP_TIMEOUT_S = 120   # per iteration, before the node side is declared hung


# -- checks before anything is started ------------------------------------------------------

def check_node() -> str:
    node = shutil.which("node")
    if not node:
        raise BenchError("node not found: the E2B SDK needs Node.js >= "
                         f"{'.'.join(map(str, NODE_MIN))} (scripts/install-deps.sh installs it)")
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)", out)
    if not m or tuple(map(int, m.groups())) < NODE_MIN:
        raise BenchError(f"{node} is Node.js {out or '(no version)'}; the e2b SDK needs >= "
                         f"{'.'.join(map(str, NODE_MIN))} (Debian 12's own nodejs is too old)")
    pkg = os.path.join(E2B_DIR, "node_modules", "e2b", "package.json")
    if not os.path.isfile(pkg):
        raise BenchError(f"{pkg} is missing: run `npm ci --prefix tests/e2b` "
                         "(scripts/install-deps.sh does)")
    got = json.load(open(pkg)).get("version")
    if got != E2B_VERSION:
        raise BenchError(f"tests/e2b/node_modules has e2b {got}, the lockfile pins {E2B_VERSION}: "
                         "run `npm ci --prefix tests/e2b`")
    if not os.path.isfile(LOOP_JS):
        raise BenchError(f"{LOOP_JS} is missing")
    return node


# -- the server -----------------------------------------------------------------------------

class Server(WarrenServe):
    """This run's `warren serve` (benchlib's: a free loopback port, a data dir under
    /var/tmp), plus the environment for the CLI and the warm pool's counters."""

    def __init__(self, binary: str, warm_pool: int):
        super().__init__(binary, "/var/tmp", "e2b", ["--no-network"], warm_pool=warm_pool)
        self.env = dict(os.environ, WARREN_URL=self.url, WARREN_TOKEN=self.token)

    def warm_counters(self):
        """(hits, misses) of the node's container warm pool, or None if not reported."""
        try:
            nodes = self.http("GET", "/v1/nodes").get("nodes", [])
        except (OSError, ValueError, BenchError):
            return None

        def find(o):
            if isinstance(o, dict):
                wp = o.get("warm_pool")
                if isinstance(wp, dict) and "hits" in wp:
                    return wp
                for v in o.values():
                    r = find(v)
                    if r:
                        return r
            elif isinstance(o, list):
                for v in o:
                    r = find(v)
                    if r:
                        return r
            return None

        wp = find(nodes)
        return (wp["hits"], wp["misses"]) if wp else None


def build_base_image(server: Server, binary: str, scratch: str):
    root = os.path.join(scratch, "rootfs")
    subprocess.run([os.path.join(REPO, "scripts", "make-busybox-rootfs.sh"), root], check=True,
                   stdout=subprocess.DEVNULL)
    for d in ("home", "run", "var/tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    os.chmod(os.path.join(root, "var/tmp"), 0o1777)
    bash = os.path.join(root, "bin", "bash")
    if os.path.lexists(bash):
        os.unlink(bash)
    with open(bash, "w") as f:
        f.write(BASH_WRAPPER)
    os.chmod(bash, 0o755)
    r = subprocess.run([binary, "image", "build", IMAGE, "--from-dir", root], env=server.env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise BenchError(f"warren image build {IMAGE} failed: {r.stderr[-2000:]}")


# -- the node side --------------------------------------------------------------------------

class E2bLoop:
    """bench/e2b_loop.mjs, one process for the whole run, driven a batch at a time."""

    def __init__(self, node: str, server: Server):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "WARREN_"))}
        env.update({"E2B_API_URL": server.url, "E2B_SANDBOX_URL": server.url,
                    "E2B_API_KEY": server.token, "NO_PROXY": "127.0.0.1,localhost",
                    "no_proxy": "127.0.0.1,localhost", "NODE_OPTIONS": ""})
        self.proc = subprocess.Popen([node, LOOP_JS], cwd=E2B_DIR, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, start_new_session=True)
        self.buf = b""
        try:
            hello = self._reply(60)
            if not hello.get("ready"):
                raise BenchError(f"e2b_loop.mjs: {hello.get('error') or hello}")
        except BaseException:
            self.close()
            raise
        self.import_ms = hello.get("import_ms")
        self.node_version = hello.get("node")

    def _reply(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode("utf-8", "replace")
                if text.startswith("@@e2b "):
                    return json.loads(text[6:])
                log(f"e2b_loop.mjs: {text}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"e2b_loop.mjs gave no answer in {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait(timeout=10)
                    raise BenchError(f"e2b_loop.mjs exited ({self.proc.returncode}) without an answer")
                self.buf += chunk

    def run(self, n: int) -> list:
        self.proc.stdin.write(f"run {n}\n".encode())
        self.proc.stdin.flush()
        r = self._reply(STEP_TIMEOUT_S * n)
        if "error" in r:
            raise BenchError(f"E2B SDK loop: {r['error']} (sandbox {r.get('sandbox')})")
        return r["iterations"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


# -- the Warren SDK side --------------------------------------------------------------------

def warren_iteration(client: "warren.Client") -> dict:
    t0 = time.perf_counter()
    sb = client.create(image=IMAGE)
    t1 = time.perf_counter()
    try:
        r = sb.run("echo hi")
        t2 = time.perf_counter()
        if r.exit_code != 0 or r.stdout != "hi\n":
            raise BenchError(f"warren sb.run('echo hi'): exit {r.exit_code}, stdout {r.stdout!r}, "
                             f"stderr {r.stderr!r}")
    except BaseException:
        sb.delete(missing_ok=True)
        raise
    sb.delete()
    t3 = time.perf_counter()
    ms = lambda a, b: (b - a) * 1000.0  # noqa: E731
    return {"create_ms": ms(t0, t1), "cmd_ms": ms(t1, t2), "kill_ms": ms(t2, t3), "total_ms": ms(t0, t3)}


# -- the same calls on the wire, without either SDK --------------------------------------------
# One keep-alive connection and Python's http.client: what each protocol costs the server,
# apart from what each SDK adds on the client's side.

class Wire:
    def __init__(self, server: Server):
        import http.client
        self.conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=60)
        self.token = server.token

    def call(self, method: str, path: str, body: bytes = None, headers: dict = None):
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        return r.status, r.read()

    def e2b(self) -> dict:
        key = {"X-API-Key": self.token, "Content-Type": "application/json"}
        t0 = time.perf_counter()
        st, body = self.call("POST", "/v2/sandboxes", json.dumps({"templateID": "base", "timeout": 300}).encode(), key)
        if st != 201:
            raise BenchError(f"e2b wire create: {st} {body[:200]!r}")
        sb = json.loads(body)
        t1 = time.perf_counter()
        msg = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"]}, "stdin": False}).encode()
        st, body = self.call("POST", "/process.Process/Start", b"\0" + struct.pack(">I", len(msg)) + msg, {
            "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
            "Connect-Timeout-Ms": "60000", "E2b-Sandbox-Id": sb["sandboxID"],
            "X-Access-Token": sb["envdAccessToken"]})
        t2 = time.perf_counter()
        if st != 200 or b'"exited":true' not in body:
            raise BenchError(f"e2b wire Start: {st} {body[:300]!r}")
        st, body = self.call("DELETE", "/sandboxes/" + sb["sandboxID"], None, key)
        if st != 204:
            raise BenchError(f"e2b wire kill: {st} {body[:200]!r}")
        t3 = time.perf_counter()
        ms = lambda a, b: (b - a) * 1000.0  # noqa: E731
        return {"create_ms": ms(t0, t1), "cmd_ms": ms(t1, t2), "kill_ms": ms(t2, t3), "total_ms": ms(t0, t3)}

    def warren(self) -> dict:
        auth = {"Authorization": "Bearer " + self.token, "Content-Type": "application/json"}
        t0 = time.perf_counter()
        st, body = self.call("POST", "/v1/sandboxes", json.dumps({"image": IMAGE, "ttl_s": 300}).encode(), auth)
        if st != 201:
            raise BenchError(f"warren wire create: {st} {body[:200]!r}")
        sid = json.loads(body)["id"]
        t1 = time.perf_counter()
        st, body = self.call("POST", f"/v1/sandboxes/{sid}/exec",
                             json.dumps({"argv": ["/bin/bash", "-l", "-c", "echo hi"]}).encode(), auth)
        t2 = time.perf_counter()
        if st != 200 or json.loads(body).get("stdout") != "hi\n":
            raise BenchError(f"warren wire exec: {st} {body[:300]!r}")
        st, body = self.call("DELETE", f"/v1/sandboxes/{sid}", None, auth)
        if st != 204:
            raise BenchError(f"warren wire delete: {st} {body[:200]!r}")
        t3 = time.perf_counter()
        ms = lambda a, b: (b - a) * 1000.0  # noqa: E731
        return {"create_ms": ms(t0, t1), "cmd_ms": ms(t1, t2), "kill_ms": ms(t2, t3), "total_ms": ms(t0, t3)}

    def close(self):
        self.conn.close()


# -- the run --------------------------------------------------------------------------------

def stats(vals: list) -> dict:
    s = sorted(vals)
    return {"n": len(s), "p50_ms": percentile(s, 50), "p99_ms": percentile(s, 99),
            "mean_ms": statistics.mean(s) if s else float("nan"),
            "min_ms": s[0] if s else float("nan"), "max_ms": s[-1] if s else float("nan")}


def measure(args, node: str, server: Server) -> dict:
    client = warren.Client(url=server.url, token=server.token)
    loop = None
    wire = Wire(server)
    try:
        loop = E2bLoop(node, server)
        warm = {w: [0, 0] for w in LOOPS}  # [served warm, made cold]
        runs = {"e2b": lambda: loop.run(1)[0], "warren": lambda: warren_iteration(client),
                "e2b_wire": wire.e2b, "warren_wire": wire.warren}

        def one(which, counted):
            before = server.warm_counters() if counted else None
            it = runs[which]()
            if before is not None:
                after = server.warm_counters()
                if after is not None:
                    warm[which][0] += after[0] - before[0]
                    warm[which][1] += after[1] - before[1]
            return it

        log(f"warm-up: {args.warmup} iterations of each loop (not counted) ...")
        for _ in range(args.warmup):
            for which in LOOPS:
                one(which, False)
        res = {w: [] for w in LOOPS}
        log(f"measuring: {args.iterations} iterations of each loop, {args.order} ...")
        if args.order == "interleaved":
            for i in range(args.iterations):
                # Alternate which goes first too, so neither always follows the other's delete.
                for which in (LOOPS if i % 2 == 0 else LOOPS[::-1]):
                    res[which].append(one(which, True))
        else:
            for which in LOOPS:
                for _ in range(args.iterations):
                    res[which].append(one(which, True))
        return {"iterations": res, "warm_pool": warm, "node_import_ms": loop.import_ms,
                "node": loop.node_version}
    finally:
        if loop is not None:
            loop.close()
        client.close()
        wire.close()


def report(args, m: dict, serve_args: list) -> dict:
    steps = (("total_ms", "create -> run -> kill (wall)"),
             ("create_ms", "create"),
             ("cmd_ms", "first command: echo hi"),
             ("kill_ms", "kill / delete"))
    names = {"e2b": "e2b SDK (node)", "warren": "warren SDK (python)",
             "e2b_wire": "e2b wire (http.client)", "warren_wire": "warren wire (http.client)"}
    out = {}
    for which in LOOPS:
        out[which] = {k: stats([it[k] for it in m["iterations"][which]]) for k, _ in steps}
    n = args.iterations
    print()
    print(f"E2B SDK {E2B_VERSION} vs Warren's Python SDK, one `warren serve {' '.join(serve_args)}`, "
          f"template base = image {IMAGE} (busybox)")
    print(f"{n} measured iterations per loop, sequential, loops {args.order}; "
          f"warm-up: {args.warmup} iterations per loop first, not counted")
    print()
    print(f"{'loop':<26} {'step':<30} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    print("-" * 89)
    for which in LOOPS:
        for k, label in steps:
            s = out[which][k]
            print(f"{names[which]:<26} {label:<30} {s['n']:>4} {s['p50_ms']:>8.2f} "
                  f"{s['p99_ms']:>8.2f} {s['mean_ms']:>8.2f}")
    print()
    ratios = {k: out["e2b"][k]["p50_ms"] / out["warren"][k]["p50_ms"] for k, _ in steps}
    verdict = "met" if ratios["total_ms"] <= TARGET_RATIO else "NOT met"
    print(f"E2B / Warren, p50 of the whole iteration: {ratios['total_ms']:.2f}x "
          f"(target: within {TARGET_RATIO}x of Warren's own SDK: {verdict})")
    print(f"  by step: create {ratios['create_ms']:.2f}x, first command {ratios['cmd_ms']:.2f}x, "
          f"kill {ratios['kill_ms']:.2f}x")
    wire_ratios = {k: out["e2b_wire"][k]["p50_ms"] / out["warren_wire"][k]["p50_ms"] for k, _ in steps}
    print(f"the server's part (the same calls on one keep-alive connection, no SDK): E2B / Warren "
          f"{wire_ratios['total_ms']:.2f}x (create {wire_ratios['create_ms']:.2f}x, first command "
          f"{wire_ratios['cmd_ms']:.2f}x, kill {wire_ratios['kill_ms']:.2f}x)")
    sdk_e2b = out["e2b"]["total_ms"]["p50_ms"] - out["e2b_wire"]["total_ms"]["p50_ms"]
    sdk_warren = out["warren"]["total_ms"]["p50_ms"] - out["warren_wire"]["total_ms"]["p50_ms"]
    print(f"what each SDK adds to an iteration (p50 SDK - p50 wire): e2b {sdk_e2b:.1f} ms, "
          f"warren {sdk_warren:.1f} ms")
    e2b_tti = out["e2b"]["create_ms"]["p50_ms"] + out["e2b"]["cmd_ms"]["p50_ms"]
    print(f"E2B's published anchor: time-to-interactive p50 ~{E2B_ANCHOR_MS:.0f} ms (E2B cloud); "
          f"here create + first command through the same SDK: {e2b_tti:.1f} ms p50 "
          f"(the anchor is {E2B_ANCHOR_MS / e2b_tti:.0f}x that; not the same machine or isolation)")
    wp = m["warm_pool"]
    if any(sum(v) for v in wp.values()):
        print(f"warm pool: e2b creates {wp['e2b'][0]}/{sum(wp['e2b'])} served warm, "
              f"warren creates {wp['warren'][0]}/{sum(wp['warren'])}")
    if n < 100:
        print(f"note: with n={n}, p99 is interpolated between the two slowest iterations")
    if m.get("node_import_ms") is not None:
        print(f"not timed: node start and `require('e2b')` ({m['node_import_ms']:.0f} ms, once per "
              f"process, {m.get('node')})")
    return {"stats": out, "ratio_p50": ratios, "wire_ratio_p50": wire_ratios, "target_ratio": TARGET_RATIO,
            "e2b_anchor_tti_p50_ms": E2B_ANCHOR_MS, "warm_pool": wp,
            "iterations": m["iterations"], "warmup": args.warmup, "order": args.order,
            "serve_args": serve_args, "node": m.get("node"), "e2b_version": E2B_VERSION}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=50, help="measured iterations per loop (50)")
    ap.add_argument("--warmup", type=int, default=3, help="iterations per loop not counted (3)")
    ap.add_argument("--order", choices=("interleaved", "sequential"), default="interleaved")
    ap.add_argument("--warm-pool", type=int, default=None,
                    help="passed to warren serve (default: the server's own default)")
    ap.add_argument("--bin", default=os.environ.get("WARREN_BIN", os.path.join(REPO, "build", "warren")))
    ap.add_argument("--json", help="also write every figure and iteration to this file")
    args = ap.parse_args()
    if args.iterations < 1 or args.warmup < 0:
        ap.error("--iterations must be at least 1 and --warmup at least 0")
    if os.geteuid() != 0:
        sys.exit("bench/e2b.py: run as root")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"bench/e2b.py: {args.bin} is not an executable (build it first)")
    try:
        node = check_node()
    except BenchError as e:
        sys.exit(f"bench/e2b.py: {e}")
    load1 = os.getloadavg()[0]
    if load1 > (os.cpu_count() or 1) / 2:
        log(f"warning: 1-minute load average {load1:.2f} on {os.cpu_count()} CPUs: the figures will be noisy")

    signal.signal(signal.SIGTERM, _raise_stopped)
    # The server's default warm pool (2), unless asked: both loops' creates are served warm.
    warm_pool = 2 if args.warm_pool is None else args.warm_pool
    serve_args = ["--no-microvm", "--no-network", "--warm-pool", str(warm_pool)]
    scratch = tempfile.mkdtemp(prefix="warren-bench-e2b-tmp-", dir="/var/tmp")
    server = None
    rc = 0
    try:
        log("starting warren serve ...")
        server = Server(args.bin, warm_pool)
        log(f"building {IMAGE} ...")
        build_base_image(server, args.bin, scratch)
        m = measure(args, node, server)
        result = report(args, m, serve_args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    except BenchError as e:
        print(f"bench/e2b.py: {e}", file=sys.stderr)
        rc = 1
    except (KeyboardInterrupt, Stopped):
        print("bench/e2b.py: interrupted", file=sys.stderr)
        rc = 130
    except Exception as e:  # the Warren SDK's errors, OSError, ...: still clean up
        print(f"bench/e2b.py: {type(e).__name__}: {e}", file=sys.stderr)
        rc = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup runs to its end
        if server is not None:
            server.delete_all()
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
