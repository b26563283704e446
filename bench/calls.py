#!/usr/bin/python3
"""fncall benchmark: isolated calls per second and latency, next to what a user would do
instead, in the same run.

  python   POST /v1/calls {"language": "python", "code": "print(1)"}: calls/s and p50/p99
           with 1 and 2 concurrent clients.
  cpp      a trivial C++ program compiled once and run per case: one call with N cases per
           client; runs/s from the call's wall time minus its compile, p50/p99 of the cases'
           own duration_ms.
  baseline fork+exec `python3 -I -S -c 'print(1)'`, `bwrap --unshare-all` of the same, and
           fork+exec / bwrap of the compiled C++ program, with 1 and 2 workers.

  cluster  with --cluster: the python rows again through a cluster on this machine (etcd, one
           `warren node` running fncall, one `warren apiserver`): what the hop from API
           server to node costs, next to serve's rows of the same run.

Starts its own `warren serve` (build/warren) with a scratch data dir, builds the runner image
(Debian bookworm + python3, gcc, g++ via mmdebstrap: a few minutes, or --data-dir of a
previous run with --keep), removes everything at the end (not a --data-dir it was given).
Root, Debian's /usr/bin/python3.

  sudo /usr/bin/python3 bench/calls.py [--iterations 1000] [--cases 200] [--json out.json]
"""

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import REPO, Api, log, start_server, stop_server, summary  # noqa: E402

RUNNER = "bench-runner:1"
CPP = "#include <cstdio>\nint main(){int x; if (scanf(\"%d\", &x) != 1) return 1; printf(\"%d\\n\", x + 1);}"


def timed_loop(fn, n, clients):
    """Runs fn() n times split over `clients` threads; returns (per-call seconds, calls/s)."""
    samples = []

    def worker(k):
        out = []
        for _ in range(n // clients):
            t0 = time.perf_counter()
            fn(k)
            out.append(time.perf_counter() - t0)
        return out

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        for part in ex.map(worker, range(clients)):
            samples += part
    return samples, len(samples) / (time.perf_counter() - t0)


def row(name, samples, rate):
    s = summary(samples)
    return {"name": name, "p50_ms": round(s["p50_ms"], 2), "p99_ms": round(s["p99_ms"], 2),
            "per_s": round(rate, 1), "n": s["n"]}


def python_rows(port, token, iterations, where):
    """`print(1)` calls with 1 and 2 clients, after a warm-up (runners started, preforked)."""
    apis = [Api(port, token) for _ in range(2)]
    for a in apis:
        for _ in range(20):
            a.call("POST", "/v1/calls", {"language": "python", "code": "print(1)"})

    def py_call(k):
        r = apis[k].call("POST", "/v1/calls", {"language": "python", "code": "print(1)"})
        assert r["stdout"] == "1\n", r

    rows = []
    for clients in (1, 2):
        s, rate = timed_loop(py_call, iterations, clients)
        rows.append(row(f"{where}: call python, {clients} client(s)", s, rate))
        log(rows[-1])
    return rows


def cluster_rows(args, runner_blob):
    """The python rows through `warren apiserver` -> `warren node` (etcd between), the runner
    image uploaded from serve's store (an EROFS blob: no second mmdebstrap)."""
    from cluster import Etcd, Proc, free_port, wait_until
    warren = os.path.join(REPO, "build", "warren")
    etcd = Etcd()
    d = tempfile.mkdtemp(prefix="warren-bench-calls-cluster-", dir="/var/tmp")
    layers = os.path.join(d, "layers")
    os.makedirs(layers)
    procs = []
    try:
        procs.append(Proc([warren, "node", "--etcd", etcd.client, "--listen",
                           f"127.0.0.1:{free_port()}", "--data-dir", os.path.join(d, "node"),
                           "--name", "b1", "--layer-store", layers, "--no-network",
                           "--no-microvm", "--warm-pool", "0", "--fncall-image", RUNNER],
                          os.path.join(d, "node.log")))
        wait_until("warren node", lambda: etcd.count("/warren/node/") >= 1, procs[0])
        port = free_port()
        procs.append(Proc([warren, "apiserver", "--etcd", etcd.client, "--listen",
                           f"127.0.0.1:{port}", "--data-dir", os.path.join(d, "api"),
                           "--layer-store", layers], os.path.join(d, "api.log")))
        token_path = os.path.join(d, "api", "admin.token")
        wait_until("warren apiserver", lambda: os.path.exists(token_path) and
                   socket.create_connection(("127.0.0.1", port), timeout=1).close() is None,
                   procs[1])
        token = open(token_path).read().strip()
        name, tag = RUNNER.split(":")
        with open(runner_blob, "rb") as f:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/layers?name={name}&tag={tag}", data=f.read(),
                headers={"Authorization": "Bearer " + token,
                         "Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req, timeout=600).read()
        return python_rows(port, token, args.iterations, "cluster (apiserver -> node)")
    finally:
        for p in reversed(procs):
            p.stop()
        etcd.stop()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("--data-dir", help="reuse this scratch dir (its runner image) instead of a new one; kept")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir for a later --data-dir")
    ap.add_argument("--cluster", action="store_true",
                    help="also through etcd + warren node + warren apiserver on this machine")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    tmp = args.data_dir or tempfile.mkdtemp(prefix="warren-bench-calls-", dir="/var/tmp")
    os.makedirs(tmp, exist_ok=True)
    proc, port, token = start_server(tmp, ["--fncall-image", RUNNER])
    rows = []
    try:
        env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{port}", WARREN_TOKEN=token)
        api = Api(port, token)
        if not any(f'{l["name"]}:{l["tag"]}' == RUNNER for l in api.call("GET", "/v1/layers")["layers"]):
            log("building the runner image (mmdebstrap)...")
            subprocess.run([os.path.join(REPO, "build", "warren"), "image", "build", RUNNER, "--debian",
                            "bookworm", "--packages", "python3,gcc,g++,libc6-dev"], env=env, check=True)
        rows += python_rows(port, token, args.iterations, "warren serve")
        apis = [Api(port, token) for _ in range(2)]

        cases = [{"stdin": f"{i}\n", "expected": f"{i + 1}\n"} for i in range(args.cases)]
        for clients in (1, 2):
            def cpp_call(k):
                r = apis[k].call("POST", "/v1/calls", {"language": "cpp", "code": CPP, "cases": cases})
                assert all(c["verdict"] == "passed" for c in r["cases"]), r
                return r

            t0 = time.perf_counter()
            with cf.ThreadPoolExecutor(clients) as ex:
                results = list(ex.map(cpp_call, range(clients)))
            wall = time.perf_counter() - t0
            compile_s = max(r["compile"]["duration_ms"] for r in results) / 1000
            durations = [c["duration_ms"] / 1000 for r in results for c in r["cases"]]
            rate = len(durations) / max(wall - compile_s, 1e-6)
            rows.append(row(f"warren call cpp run (compiled once), {clients} client(s)", durations, rate))
            log(rows[-1])

        # Baselines, same run.
        py = ["/usr/bin/python3", "-I", "-S", "-c", "print(1)"]
        bwrap = shutil.which("bwrap")
        bw = [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
              "--dev", "/dev", "--tmpfs", "/tmp"] if bwrap else None
        exe = os.path.join(tmp, "plus1")
        subprocess.run(["g++", "-O2", "-x", "c++", "-o", exe, "-"], input=CPP.encode(), check=True)
        for name, argv, stdin in [("fork+exec python3 -I -S", py, None),
                                  ("bwrap --unshare-all python3 -I -S", bw + py if bw else None, None),
                                  ("fork+exec cpp program", [exe], b"1\n"),
                                  ("bwrap --unshare-all cpp program", bw + [exe] if bw else None, b"1\n")]:
            if argv is None:
                log(f"skipped {name}: bwrap not installed")
                continue
            for clients in (1, 2):
                s, rate = timed_loop(lambda k: subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL,
                                                              check=True), args.iterations, clients)
                rows.append(row(f"{name}, {clients} worker(s)", s, rate))
                log(rows[-1])
        if args.cluster:
            digest = next(l["digest"] for l in api.call("GET", "/v1/layers")["layers"]
                          if f'{l["name"]}:{l["tag"]}' == RUNNER)
            stop_server(proc)  # the cluster gets the machine to itself
            rows += cluster_rows(args, os.path.join(tmp, "data", "blobs", "sha256",
                                                    digest.split(":")[-1]))
    finally:
        stop_server(proc)
        if not args.keep and not args.data_dir:  # a --data-dir given is the caller's to keep
            shutil.rmtree(tmp, ignore_errors=True)

    width = max(len(r["name"]) for r in rows)
    print(f"{'cycle'.ljust(width)}  {'p50 ms':>8}  {'p99 ms':>8}  {'per s':>8}")
    for r in rows:
        print(f"{r['name'].ljust(width)}  {r['p50_ms']:>8.2f}  {r['p99_ms']:>8.2f}  {r['per_s']:>8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
