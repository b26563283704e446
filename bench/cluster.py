#!/usr/bin/env python3
"""bench/cluster.py: the cluster's create path at the unit's scale, against a real etcd.

Two parts, each on a fresh etcd (on free loopback ports, a scratch dir under /var/tmp):

`api`: the real thing. `warren node --simulate 160` (160 nodes of the unit's shape, 192 cores
and 1.5 TiB each, heartbeating, accepting creates without kernel work) and 1, 2 and 4
`warren apiserver` replicas; build/bench_cluster_api POSTs creates to every replica at once
(--clients each) for --seconds. Reported: creates/s, create latency, placement latency (the
API servers' warren_placement_seconds), etcd writes (raft proposals) and request bytes per
create (etcd's own counters, less what the idle cluster does in as long); then one job's
32,000-sandbox batch in one call; then batches until --live sandboxes are alive, and etcd's
database size.

`floor`: what the create path costs without the API servers, for comparison in the same run:
placement and the reservation transaction that writes the record, by 1, 2 and 4 replicas
in one process (build/bench_cluster_store), next to bare etcd puts of the same record.

    /usr/bin/python3 bench/cluster.py [--parts api,floor] [--seconds 5] [--clients 1,2,4]
                                      [--live 380000] [--batch 32000]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


class Etcd:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="warren-bench-etcd-", dir="/var/tmp")
        self.client = f"http://127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        # As a cluster would run it (docs/design.md): an 8 GiB quota (the 2 GiB default is too
        # small for the unit's records plus their history) and a minute of history kept.
        self.proc = subprocess.Popen(
            ["etcd", "--name", "b0", "--data-dir", self.dir + "/data",
             "--listen-client-urls", self.client, "--advertise-client-urls", self.client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"b0={peer}", "--quota-backend-bytes", str(8 << 30),
             "--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1m",
             "--log-level", "error", "--logger", "zap",
             "--log-outputs", self.dir + "/etcd.log"])
        for _ in range(200):
            try:
                post(self.client + "/v3/kv/range", {"key": "eA=="})
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("etcd did not start")

    def status(self):
        return post(self.client + "/v3/maintenance/status", {})

    def compact_and_defrag(self):
        rev = post(self.client + "/v3/kv/range", {"key": "eA=="})["header"]["revision"]
        post(self.client + "/v3/kv/compaction", {"revision": rev, "physical": True})
        post(self.client + "/v3/maintenance/defragment", {})

    def metrics(self):
        """etcd's counters: writes committed through raft, bytes it received."""
        with urllib.request.urlopen(self.client + "/metrics", timeout=30) as r:
            text = r.read().decode()
        out = {"proposals": 0.0, "received_bytes": 0.0}
        for line in text.splitlines():
            if line.startswith("etcd_server_proposals_committed_total "):
                out["proposals"] = float(line.split()[-1])
            elif line.startswith("etcd_network_client_grpc_received_bytes_total"):
                out["received_bytes"] += float(line.split()[-1])
        return out

    def count(self, prefix):
        b64 = lambda x: __import__("base64").b64encode(x.encode()).decode()
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = post(self.client + "/v3/kv/range",
                 {"key": b64(prefix), "range_end": b64(end), "count_only": True})
        return int(r.get("count", 0))

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)



def floor(args):
    etcd = Etcd()
    try:
        out = subprocess.run(
            [args.store_driver, "--etcd", etcd.client, "--nodes", str(args.nodes),
             "--seconds", str(args.seconds), "--clients", args.clients, "--batch",
             str(args.batch), "--live", str(args.floor_live), "--workers", str(args.workers)],
            check=True, capture_output=True, text=True).stdout
        phases = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        before = etcd.status()
        etcd.compact_and_defrag()
        after = etcd.status()
    finally:
        etcd.stop()

    print(f"## The floor: placement and reservations without API servers ({args.nodes} "
          f"simulated nodes, {os.cpu_count()} cores here, real etcd 3.4)\n")
    print(f"Each replica serves {args.workers} creates at once; the baseline runs as many "
          "clients in all, each putting one record.\n")
    print("| replicas | bare etcd put /s (baseline) | creates/s "
          "(place + reserve + record) | ratio | placement p50 / p99 ms | create p50 / p99 ms "
          "| sandboxes / txn | etcd writes / create | request bytes / create | CAS conflicts |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    bare = {p["clients"]: p for p in phases if p["phase"] == "bare_puts"}
    for p in (p for p in phases if p["phase"] == "creates"):
        b = bare.get(p["clients"], {})
        ratio = p["creates_per_s"] / b["puts_per_s"] if b.get("puts_per_s") else float("nan")
        print(f"| {p['clients']} | {b.get('puts_per_s', 0):.0f} | {p['creates_per_s']:.0f} | "
              f"{ratio:.2f} | {p['place_p50_ms']:.3f} / {p['place_p99_ms']:.3f} | "
              f"{p['create_p50_ms']:.2f} / {p['create_p99_ms']:.2f} | "
              f"{p['sandboxes_per_txn']:.1f} | "
              f"{p['etcd_writes_per_create']:.2f} | {p['etcd_request_bytes_per_create']:.0f} | "
              f"{p['conflicts']} |")
    print()
    for p in phases:
        if p["phase"] == "batch":
            print(f"One job's batch: {p['placed']:,} of {p['sandboxes']:,} sandboxes placed on "
                  f"{p['nodes_used']} nodes: planned in {p['plan_ms']:.1f} ms, reserved and "
                  f"recorded in {p['total_ms'] / 1000:.2f} s.\n")
        if p["phase"] == "fill":
            print(f"etcd with {p['live_records']:,} live sandbox records: database "
                  f"{int(before['dbSize']) / 2**20:.0f} MiB with history, "
                  f"{int(after['dbSize']) / 2**20:.0f} MiB after compaction and defragmentation "
                  f"({int(after['dbSize']) / max(p['live_records'], 1):.0f} bytes a record).\n")
    return phases


class Proc:
    """A warren process of the bench, its output in a log file under the scratch dir."""

    def __init__(self, argv, log_path, env=None):
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n=30):
        with open(self.log_path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode(errors="replace")


def wait_until(what, check, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"{what}: exited {proc.proc.returncode}\n{proc.tail()}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not ready in {timeout} s\n{proc.tail()}")


def histogram(text, name):
    """{le: cumulative count} of a Prometheus histogram in `text`."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket{le=\""):
            le = line[len(name) + 12:line.index('"}')]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.split()[-1])
    return out


def quantile(buckets, q):
    """The q-quantile of a cumulative histogram, interpolated inside its bucket (ms)."""
    items = sorted(buckets.items())
    total = items[-1][1] if items else 0
    if total <= 0:
        return float("nan")
    want, lo, below = q * total, 0.0, 0.0
    for le, n in items:
        if n >= want:
            if le == float("inf"):
                return lo * 1000
            frac = (want - below) / (n - below) if n > below else 1
            return (lo + (le - lo) * frac) * 1000
        lo, below = le, n
    return lo * 1000


class ApiCluster:
    """etcd, `warren node --simulate N`, and API server replicas added on demand."""

    def __init__(self, args):
        self.args = args
        self.etcd = Etcd()
        self.dir = tempfile.mkdtemp(prefix="warren-bench-cluster-", dir="/var/tmp")
        self.layers = os.path.join(self.dir, "layers")
        os.makedirs(self.layers)
        self.apis = []
        self.nodes = Proc([args.warren, "node", "--simulate", str(args.nodes), "--name", "sim",
                           "--etcd", self.etcd.client, "--listen", "127.0.0.1:0", "--ttl", "10"],
                          os.path.join(self.dir, "nodes.log"))
        wait_until("simulated nodes", lambda: self.etcd.count("/warren/node/") >= args.nodes,
                   self.nodes)

    def add_api(self):
        i = len(self.apis)
        port = free_port()
        data = os.path.join(self.dir, f"api{i}")
        os.makedirs(data)
        p = Proc([self.args.warren, "apiserver", "--etcd", self.etcd.client, "--listen",
                  f"127.0.0.1:{port}", "--data-dir", data, "--layer-store", self.layers],
                 os.path.join(self.dir, f"api{i}.log"))
        p.url = f"http://127.0.0.1:{port}"

        def healthy():
            with urllib.request.urlopen(p.url + "/healthz", timeout=2) as r:
                return r.status == 200
        wait_until(f"API server {i}", healthy, p)
        with open(os.path.join(data, "admin.token")) as f:
            self.token = f.read().strip()
        self.apis.append(p)

    def cli(self, *argv):
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARREN_")}
        env.update({"WARREN_URL": self.apis[0].url, "WARREN_TOKEN": self.token,
                    "WARREN_HOME": self.dir})
        return subprocess.run([self.args.warren, *argv], env=env, capture_output=True,
                              text=True, timeout=300, check=True)

    def build_image(self, ref):
        root = os.path.join(self.dir, "rootfs")
        os.makedirs(os.path.join(root, "etc"))
        with open(os.path.join(root, "etc", "os-release"), "w") as f:
            f.write("NAME=bench\n")
        self.cli("image", "build", ref, "--from-dir", root)

    def placement(self):
        """warren_placement_seconds summed over the replicas."""
        total = {}
        for p in self.apis:
            req = urllib.request.Request(p.url + "/metrics",
                                         headers={"Authorization": "Bearer " + self.token})
            with urllib.request.urlopen(req, timeout=60) as r:
                for le, n in histogram(r.read().decode(), "warren_placement_seconds").items():
                    total[le] = total.get(le, 0) + n
        return total

    def drive(self, phase, **kw):
        argv = [self.args.api_driver, "--api", ",".join(p.url for p in self.apis), "--token",
                self.token, "--image", "bench:1", "--phase", phase]
        for k, v in kw.items():
            argv += ["--" + k, str(v)]
        out = subprocess.run(argv, check=True, capture_output=True, text=True,
                             timeout=3600).stdout
        return json.loads(out.strip().splitlines()[-1])

    def close(self):
        for p in self.apis:
            p.stop()
        self.nodes.stop()
        self.etcd.stop()
        if self.args.keep:
            print(f"(logs kept in {self.dir})")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def measured(c, run):
    """Runs `run()`; returns its result with etcd's writes and bytes and the placement
    histogram over it, less what the idle cluster (heartbeats, polls) does in as long."""
    e0, h0, t0 = c.etcd.metrics(), c.placement(), time.time()
    r = run()
    e1, h1, dt = c.etcd.metrics(), c.placement(), time.time() - t0
    r["proposals"] = e1["proposals"] - e0["proposals"] - c.idle["proposals"] * dt
    r["received_bytes"] = e1["received_bytes"] - e0["received_bytes"] - \
        c.idle["received_bytes"] * dt
    r["placement"] = {le: h1.get(le, 0) - h0.get(le, 0) for le in h1}
    return r


def api(args):
    c = ApiCluster(args)
    results = []
    try:
        c.add_api()
        c.build_image("bench:1")
        # What the cluster does by itself (heartbeats, node polls, periodic sweeps), per second.
        e0 = c.etcd.metrics()
        time.sleep(3)
        e1 = c.etcd.metrics()
        c.idle = {k: (e1[k] - e0[k]) / 3 for k in e0}
        for replicas in [int(x) for x in args.clients.split(",")]:
            while len(c.apis) < replicas:
                c.add_api()
            r = measured(c, lambda: c.drive("creates", seconds=args.seconds,
                                            clients=args.api_clients))
            r["replicas"] = replicas
            results.append(r)
        batch = measured(c, lambda: c.drive("batch", count=args.batch))
        fill = c.drive("fill", count=min(args.batch, 32000), live=args.live,
                       etcd=c.etcd.client) \
            if args.live > 0 else None
        live = c.etcd.count("/warren/sandboxes/")
        before = c.etcd.status()
        c.etcd.compact_and_defrag()
        after = c.etcd.status()
    finally:
        c.close()

    print(f"## Through the API servers ({args.nodes} simulated nodes of 192 cores and 1.5 TiB, "
          f"{os.cpu_count()} cores here running etcd, the nodes, the API servers and the "
          "clients)\n")
    print(f"{args.api_clients} clients per replica, each one create at a time (image, 0.05 CPU, "
          "64 MB); etcd writes and bytes are etcd's own counters less the idle cluster's "
          f"({c.idle['proposals']:.0f} writes/s, {c.idle['received_bytes'] / 1024:.0f} KiB/s "
          "of heartbeats and sweeps).\n")
    print("| API server replicas | creates/s | vs 5,000/s | create p50 / p99 ms | "
          "placement p50 / p99 ms | etcd writes / create | etcd request bytes / create | "
          "errors |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        n = max(r["created"], 1)
        print(f"| {r['replicas']} | {r['creates_per_s']:.0f} | {r['creates_per_s'] / 5000:.3f} "
              f"| {r['create_p50_ms']:.1f} / {r['create_p99_ms']:.1f} | "
              f"{quantile(r['placement'], 0.5):.2f} / {quantile(r['placement'], 0.99):.2f} | "
              f"{r['proposals'] / n:.2f} | {r['received_bytes'] / n:.0f} | "
              f"{sum(r['errors'].values()) if r['errors'] else 0} |")
    print()
    print(f"One job's batch, one call to one replica: {batch['made']:,} of {batch['count']:,} "
          f"made in {batch['seconds']:.1f} s ({batch['made'] / max(batch['seconds'], 1e-9):.0f}"
          f"/s), placement p99 {quantile(batch['placement'], 0.99):.2f} ms, "
          f"{batch['proposals'] / max(batch['made'], 1):.2f} etcd writes a sandbox"
          + (f"; errors {batch['errors']}" if batch["errors"] else "") + ".\n")
    if fill:
        print(f"Filled to {live:,} live sandboxes ({fill['made']:,} more in "
              f"{fill['seconds']:.0f} s, {fill['made'] / max(fill['seconds'], 1e-9):.0f}/s, "
              "batches from every replica at once"
              + (f", errors {fill['errors']}" if fill["errors"] else "") + "): etcd database "
              f"{int(before['dbSize']) / 2**20:.0f} MiB with history, "
              f"{int(after['dbSize']) / 2**20:.0f} MiB after compaction and defragmentation "
              f"({int(after['dbSize']) / max(live, 1):.0f} bytes a sandbox).\n")
    print("Target: 5,000 creates/s with placement p99 <= 10 ms and 380,000 live records.\n")
    return results


def main():
    # A stopped bench (timeout, kill) still stops what it started and removes its scratch.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="api,floor")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", default="1,2,4", help="API server replicas, in turn")
    ap.add_argument("--api-clients", type=int, default=32,
                    help="creates in flight at each API server replica")
    ap.add_argument("--nodes", type=int, default=160)
    ap.add_argument("--batch", type=int, default=32000)
    ap.add_argument("--live", type=int, default=380000)
    ap.add_argument("--floor-live", type=int, default=380000)
    ap.add_argument("--workers", type=int, default=32,
                    help="creates each replica of the floor serves at once")
    ap.add_argument("--keep", action="store_true", help="keep the logs")
    ap.add_argument("--warren", default=os.path.join(ROOT, "build", "warren"))
    ap.add_argument("--api-driver", default=os.path.join(ROOT, "build", "bench_cluster_api"))
    ap.add_argument("--store-driver", default=os.path.join(ROOT, "build", "bench_cluster_store"))
    args = ap.parse_args()
    parts = args.parts.split(",")
    if "api" in parts:
        api(args)
    if "floor" in parts:
        floor(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
