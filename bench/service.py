#!/usr/bin/python3
"""Sandbox service benchmark: exec round trip, big batch creates, API read throughput.

  exec      POST /v1/sandboxes/{id}/exec {"argv": ["true"]} in a running sandbox, waited for
            (p50/p95/p99 ms), against a plain fork+exec of /bin/true on the host and an
            `nsenter` into the sandbox's namespaces running `true` (what an operator would do
            by hand), in the same run.
  batch     POST /v1/sandboxes:batch {"count": N} (default 1000): wall time and sandboxes/s,
            then the time to delete them all.
  get       GET /v1/sandboxes/{id} requests/s with 1 and 2 keep-alive clients.

Starts its own `warren serve` (build/warren) on a free loopback port with a scratch data dir
under /var/tmp, builds a busybox image, and removes everything at the end. Root, Debian's
/usr/bin/python3, standard library only.

  sudo /usr/bin/python3 bench/service.py [--batch 1000] [--iterations 300] [--json out.json]
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def pct(vals, p):
    vals = sorted(vals)
    if not vals:
        return float("nan")
    k = (len(vals) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def summary(samples_s):
    ms = [x * 1000 for x in samples_s]
    return {"n": len(ms), "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "p99_ms": pct(ms, 99),
            "mean_ms": statistics.mean(ms) if ms else float("nan")}


class Api:
    def __init__(self, port, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.h = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.h)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None


def start_server(tmp, extra_args=(), build=None):
    """`warren serve` from `build` (default: this checkout's build/) on a free port, data in
    TMP/data, log in TMP/serve.log; returns (process, port, admin token) once it answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    data = os.path.join(tmp, "data")
    log_f = open(os.path.join(tmp, "serve.log"), "wb")
    proc = subprocess.Popen([os.path.join(build or os.path.join(REPO, "build"), "warren"), "serve", "--listen", f"127.0.0.1:{port}",
                             "--data-dir", data, *extra_args], stdout=log_f, stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(300):
        if os.path.exists(os.path.join(data, "admin.token")):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                pass
        time.sleep(0.1)
    token = open(os.path.join(data, "admin.token")).read().strip()
    return proc, port, token


def build_busybox_image(tmp, port, token, name):
    """A busybox root in TMP/rootfs, built into image NAME on the server at `port`; returns the root."""
    root = os.path.join(tmp, "rootfs")
    subprocess.run([os.path.join(REPO, "scripts", "make-busybox-rootfs.sh"), root], check=True,
                   stdout=subprocess.DEVNULL)
    env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{port}", WARREN_TOKEN=token)
    subprocess.run([os.path.join(REPO, "build", "warren"), "image", "build", name, "--from-dir", root],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return root


def stop_server(proc, timeout=60):
    """SIGTERM (the server deletes its sandboxes), SIGKILL if it has not ended in `timeout`."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bench_exec(api, sid, n):
    samples = []
    for i in range(n + 10):
        t0 = time.perf_counter()
        r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        dt = time.perf_counter() - t0
        assert r["exit_code"] == 0, r
        if i >= 10:
            samples.append(dt)
    return samples


def bench_fork(n):
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["/bin/true"])
        samples.append(time.perf_counter() - t0)
    return samples


def bench_nsenter(pid, n):
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["nsenter", "-t", str(pid), "-U", "-m", "-p", "-n", "-u", "-i", "--preserve-credentials",
                        "/bin/true"], check=False, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - t0)
    return samples


def bench_get(port, token, sid, clients, seconds):
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def run(k):
        a = Api(port, token)
        while time.perf_counter() < stop:
            a.call("GET", f"/v1/sandboxes/{sid}")
            counts[k] += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--get-seconds", type=float, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/service.py: run as root")
    tmp = tempfile.mkdtemp(prefix="warren-bench-service-", dir="/var/tmp")
    proc = None
    out = {}
    try:
        proc, port, token = start_server(tmp)
        build_busybox_image(tmp, port, token, "b:1")
        api = Api(port, token)
        sb = api.call("POST", "/v1/sandboxes", {"image": "b:1"})
        sid = sb["id"]
        pid = json.load(open(f"/run/warren/{api.call('GET', '/v1/nodes')['nodes'][0]['cgroup_parent']}/{sid}.json"))["pid"]

        log("exec round trips ...")
        out["exec_warren"] = summary(bench_exec(api, sid, args.iterations))
        out["exec_fork_true"] = summary(bench_fork(args.iterations))
        out["exec_nsenter_true"] = summary(bench_nsenter(pid, min(args.iterations, 200)))

        log("GET throughput ...")
        out["get_rps_1"] = bench_get(port, token, sid, 1, args.get_seconds)
        out["get_rps_2"] = bench_get(port, token, sid, 2, args.get_seconds)
        api.call("DELETE", f"/v1/sandboxes/{sid}")

        log(f"batch of {args.batch} ...")
        t0 = time.perf_counter()
        r = api.call("POST", "/v1/sandboxes:batch", {"count": args.batch, "spec": {"image": "b:1", "memory_mb": 64}})
        t_create = time.perf_counter() - t0
        ok = len(r["sandboxes"])
        t0 = time.perf_counter()
        for s in r["sandboxes"]:
            api.call("DELETE", f"/v1/sandboxes/{s['id']}")
        t_delete = time.perf_counter() - t0
        out["batch"] = {"count": args.batch, "created": ok, "errors": len(r["errors"]), "create_s": t_create,
                        "per_s": ok / t_create, "delete_s": t_delete}
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{'exec round trip (true)':<40} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for k, name in (("exec_warren", "warren POST .../exec (wait)"), ("exec_fork_true", "host fork+exec /bin/true"),
                    ("exec_nsenter_true", "nsenter into the sandbox + true")):
        s = out[k]
        print(f"{name:<40} {s['p50_ms']:>8.2f} {s['p95_ms']:>8.2f} {s['p99_ms']:>8.2f}")
    print(f"\nGET /v1/sandboxes/{{id}}: {out['get_rps_1']:.0f} req/s (1 client), {out['get_rps_2']:.0f} req/s (2 clients)")
    b = out["batch"]
    print(f"batch of {b['count']}: {b['created']} created ({b['errors']} errors) in {b['create_s']:.1f} s = "
          f"{b['per_s']:.0f} sandboxes/s; deleted one by one in {b['delete_s']:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
