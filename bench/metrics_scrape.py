#!/usr/bin/python3
"""What a Prometheus scrape of /metrics costs as sandboxes pile up (issue #24: at 5,000
sandboxes it should cost no more than at 5).

For each count in --counts (default 5, 500, 2000) it makes that many idle container sandboxes
(busybox image, memory_mb 64, batches of 500), then times, in the same run and over one
keep-alive connection each:

  metrics   GET /metrics               (the thing measured)
  healthz   GET /healthz               (the floor: one HTTP round trip that does no work)
  list      GET /v1/sandboxes          (what reads every record: grows with the count)

and prints p50/p99 per count, with the ratio of each metrics p50 to the first count's.

Starts its own `warren serve` (build/warren, --no-microvm --no-network, a scratch dir under
/var/tmp) and removes everything at the end. Root, Debian's /usr/bin/python3.

  sudo /usr/bin/python3 bench/metrics_scrape.py [--counts 5,500,2000] [--scrapes 200] [--json out.json]
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import Api, build_busybox_image, log, start_server, stop_server, summary  # noqa: E402

IMAGE = "bench-metrics:1"


def timed_gets(port, token, path, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    h = {"Authorization": "Bearer " + token}
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", path, headers=h)
        r = conn.getresponse()
        r.read()
        out.append(time.perf_counter() - t0)
        if r.status != 200:
            raise RuntimeError(f"GET {path}: {r.status}")
    conn.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", default="5,500,2000")
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    counts = sorted(int(c) for c in args.counts.split(","))
    tmp = tempfile.mkdtemp(prefix="warren-bench-metrics-", dir="/var/tmp")
    proc = None
    rows = []
    try:
        proc, port, token = start_server(tmp, ["--no-microvm", "--no-network"])
        root = build_busybox_image(tmp, port, token, IMAGE)
        api = Api(port, token)
        alive = 0
        for count in counts:
            while alive < count:
                n = min(500, count - alive)
                r = api.call("POST", "/v1/sandboxes:batch", {"count": n, "spec": {"image": IMAGE, "memory_mb": 64}})
                if r["errors"]:
                    raise RuntimeError(f"batch: {r['errors'][:3]}")
                alive += len(r["sandboxes"])
            log(f"{alive} sandboxes: scraping ...")
            row = {"sandboxes": alive}
            for name, path in (("metrics", "/metrics"), ("healthz", "/healthz"), ("list", "/v1/sandboxes")):
                timed_gets(port, token, path, 10)  # warm
                row[name] = summary(timed_gets(port, token, path, args.scrapes if name != "list" else 20))
            rows.append(row)
        log("deleting ...")
        for sb in api.call("GET", "/v1/sandboxes")["sandboxes"]:
            api.call("DELETE", f"/v1/sandboxes/{sb['id']}")
    finally:
        if proc:
            stop_server(proc)
        shutil.rmtree(tmp, ignore_errors=True)

    base = rows[0]["metrics"]["p50_ms"]
    print("| sandboxes | /metrics p50 ms | p99 ms | vs first | /healthz p50 ms | /v1/sandboxes p50 ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['sandboxes']} | {r['metrics']['p50_ms']:.2f} | {r['metrics']['p99_ms']:.2f} | "
              f"{r['metrics']['p50_ms'] / base:.2f}x | {r['healthz']['p50_ms']:.2f} | {r['list']['p50_ms']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
