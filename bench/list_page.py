#!/usr/bin/python3
"""What the dashboard's sandbox list costs on a `warren serve` holding 100,000 sandbox
records (issue #32: a list of 100,000 pages and filters on the server).

The records are written into the state database of a stopped serve (copies of one real
record, `failed`, with labels job=rl-0..99), then the serve is started on it again and, in the
same run and over one keep-alive connection each, it times:

  healthz      GET /healthz                                  (the floor: an HTTP round trip)
  page         GET /v1/sandboxes?limit=100                   (the dashboard's first page)
  later page   GET /v1/sandboxes?limit=100&page_token=...    (a page from the middle)
  filtered     GET /v1/sandboxes?label=job=rl-7&limit=100    (1% match)
  whole list   GET /v1/sandboxes                             (what a client without paging reads)

and prints p50/p99 and each one's answer size. Root, Debian's /usr/bin/python3; its own
serve (build/warren, --no-microvm --no-network) in a scratch dir under /var/tmp, removed after.

  sudo /usr/bin/python3 bench/list_page.py [--records 100000] [--gets 30] [--json out.json]
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import Api, build_busybox_image, log, start_server, stop_server, summary  # noqa: E402


def timed_gets(port, token, path, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out, size = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", path, headers={"Authorization": "Bearer " + token})
        r = conn.getresponse()
        body = r.read()
        out.append(time.perf_counter() - t0)
        if r.status != 200:
            raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
        size = len(body)
    conn.close()
    return out, size


def fill(db_path, template, n):
    """n copies of `template` (a stored record), failed, ten a millisecond apart."""
    db = sqlite3.connect(db_path)
    rows = []
    for i in range(n):
        doc = dict(template)
        doc["id"] = f"sb-bench{i:08d}"
        doc["state"] = "failed"
        doc["labels"] = {"job": f"rl-{i % 100}", "n": str(i)}
        doc["ttl_s"] = None
        at = 1765000000 + i / 10000
        doc["created_at"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"
        doc["error"] = {"code": "internal", "message": "made by bench/list_page.py"}
        rows.append((doc["id"], "failed", doc["created_at"], json.dumps(doc)))
    db.executemany("INSERT INTO sandboxes (id, state, created_at, doc) VALUES (?, ?, ?, ?)", rows)
    db.commit()
    db.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--gets", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="warren-bench-list-", dir="/var/tmp")
    flags = ["--no-microvm", "--no-network", "--warm-pool", "0"]
    proc = None
    try:
        proc, port, token = start_server(tmp, flags)
        build_busybox_image(tmp, port, token, "bench-list:1")
        api = Api(port, token)
        sb = api.call("POST", "/v1/sandboxes", {"image": "bench-list:1", "memory_mb": 64})
        db_path = os.path.join(tmp, "data", "state.db")
        db = sqlite3.connect(db_path)
        template = json.loads(db.execute("SELECT doc FROM sandboxes WHERE id = ?", (sb["id"],)).fetchone()[0])
        db.close()
        stop_server(proc)
        proc = None
        log(f"writing {args.records} records")
        fill(db_path, template, args.records)
        proc, port, token = start_server(tmp, flags)
        api = Api(port, token)
        page = api.call("GET", "/v1/sandboxes?limit=100")
        if page["total"] < args.records:
            raise RuntimeError(f"the serve lists {page['total']} of {args.records} records")
        # A token from the middle: page through half the list on the server's own tokens.
        token_mid = page["next_page_token"]
        for _ in range(args.records // 200 - 1):
            token_mid = api.call("GET", "/v1/sandboxes?limit=100&page_token=" + urllib.parse.quote(token_mid))["next_page_token"]
        cases = [("healthz", "/healthz"),
                 ("page", "/v1/sandboxes?limit=100"),
                 ("later page", "/v1/sandboxes?limit=100&page_token=" + urllib.parse.quote(token_mid)),
                 ("filtered", "/v1/sandboxes?label=job%3Drl-7&limit=100"),
                 ("whole list", "/v1/sandboxes")]
        results = {}
        print(f"\n{args.records} sandbox records, {args.gets} GETs each, one keep-alive connection\n")
        print("| request | p50 ms | p99 ms | answer bytes |")
        print("|---|---|---|---|")
        for name, path in cases:
            gets = max(3, args.gets // 10) if name == "whole list" else args.gets
            times, size = timed_gets(port, token, path, gets)
            s = summary(times)
            results[name] = dict(s, bytes=size)
            print(f"| {name} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {size} |", flush=True)
        ratio = results["whole list"]["p50_ms"] / results["page"]["p50_ms"]
        print(f"\nwhole list / one page (p50): {ratio:.1f}x; "
              f"one page / healthz: {results['page']['p50_ms'] / results['healthz']['p50_ms']:.0f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"records": args.records, "results": results}, f, indent=1)
    finally:
        if proc:
            stop_server(proc, timeout=300)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
