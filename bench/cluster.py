#!/usr/bin/env python3
"""bench/cluster.py: the cluster's create path at the unit's scale, against a real etcd.

Today (issue 25 in progress) it measures the floor under the API servers: placement over 160
simulated nodes (192 cores, 1.5 TiB each, heartbeating) and the reservation transaction that
writes each sandbox record (concurrent creates for one node share one, see
cluster/reservation_batcher.h), by 1, 2 and 4 API server replicas (each its own etcd client,
node view, reservation cache and group committer, serving --workers creates at once), next to
bare etcd puts of the same record by as many clients, in the same run; then one job's 32,000-sandbox batch, then etcd filled to 380,000 live records for its
database size. The driver is build/bench_cluster_store; this script starts etcd (on free
loopback ports, a scratch dir under /var/tmp) and prints the tables.

    /usr/bin/python3 bench/cluster.py [--seconds 5] [--clients 1,2,4] [--live 380000]
"""

import argparse
import json
import os
import shutil
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
        # As a cluster would run it: an 8 GiB quota (the 2 GiB default is too small for the
        # unit's records plus their history).
        self.proc = subprocess.Popen(
            ["etcd", "--name", "b0", "--data-dir", self.dir + "/data",
             "--listen-client-urls", self.client, "--advertise-client-urls", self.client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"b0={peer}", "--quota-backend-bytes", str(8 << 30),
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

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", default="1,2,4")
    ap.add_argument("--nodes", type=int, default=160)
    ap.add_argument("--batch", type=int, default=32000)
    ap.add_argument("--live", type=int, default=380000)
    ap.add_argument("--workers", type=int, default=32,
                    help="creates each API server replica serves at once")
    ap.add_argument("--driver", default=os.path.join(ROOT, "build", "bench_cluster_store"))
    args = ap.parse_args()
    etcd = Etcd()
    try:
        out = subprocess.run(
            [args.driver, "--etcd", etcd.client, "--nodes", str(args.nodes), "--seconds",
             str(args.seconds), "--clients", args.clients, "--batch", str(args.batch),
             "--live", str(args.live), "--workers", str(args.workers)], check=True, capture_output=True, text=True).stdout
        phases = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        before = etcd.status()
        etcd.compact_and_defrag()
        after = etcd.status()
    finally:
        etcd.stop()

    print(f"## Cluster create path at the unit's scale ({args.nodes} simulated nodes, "
          f"{os.cpu_count()} cores here, real etcd 3.4)\n")
    print(f"Each replica serves {args.workers} creates at once; the baseline runs as many "
          "clients in all, each putting one record.\n")
    print("| API server replicas | bare etcd put /s (baseline) | creates/s "
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
    print("\nTarget: 5,000 creates/s with placement p99 <= 10 ms.\n")
    for p in phases:
        if p["phase"] == "batch":
            print(f"One job's batch: {p['placed']:,} of {p['sandboxes']:,} sandboxes placed on "
                  f"{p['nodes_used']} nodes: planned in {p['plan_ms']:.1f} ms, reserved and "
                  f"recorded in {p['total_ms'] / 1000:.2f} s.\n")
        if p["phase"] == "fill":
            print(f"etcd with {p['live_records']:,} live sandbox records: database "
                  f"{int(before['dbSize']) / 2**20:.0f} MiB with history, "
                  f"{int(after['dbSize']) / 2**20:.0f} MiB after compaction and defragmentation "
                  f"({int(after['dbSize']) / max(p['live_records'], 1):.0f} bytes a record).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
