#!/usr/bin/env python3
"""Warren demo: a batch of sandboxes, each running a small program, results in a table.

Uses the Python SDK against a running `warren serve` (WARREN_URL / WARREN_TOKEN, or the
defaults). The image must exist (scripts/demo.sh builds a busybox base image first).

  python3 examples/demo.py --image demo:busybox --count 24 --workers 4
"""
import argparse
import concurrent.futures as cf
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
import warren  # noqa: E402

# Each sandbox gets its own program: sum the first N integers, in its own shell, and report
# who it thinks it is. The host checks the answer.
PROGRAM = """#!/bin/sh
n=$1
i=1; s=0
while [ $i -le $n ]; do s=$((s + i)); i=$((i + 1)); done
echo "sum=$s uid=$(id -u) host=$(hostname) procs=$(ls -d /proc/[0-9]* | wc -l)"
"""


def one(client, image, k):
    t0 = time.monotonic()
    n = 100 + 37 * k
    with client.sandbox(image=image, memory_mb=128, labels={"demo": "batch"}) as sb:
        t_created = time.monotonic()
        sb.write_file("/tmp/prog.sh", PROGRAM, mode=0o755)
        r = sb.run(["/tmp/prog.sh", str(n)], timeout=30)
        out = r.stdout.strip()
        want = f"sum={n * (n + 1) // 2} uid=0 host={sb.id}"
        ok = r.exit_code == 0 and out.startswith(want)
        return {
            "k": k, "id": sb.id, "n": n, "exit": r.exit_code, "ok": ok, "out": out,
            "create_ms": (t_created - t0) * 1000, "total_ms": (time.monotonic() - t0) * 1000,
        }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", default="demo:busybox")
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()

    client = warren.Client()
    t0 = time.monotonic()
    results = []
    with cf.ThreadPoolExecutor(args.workers) as pool:
        futs = [pool.submit(one, client, args.image, k) for k in range(args.count)]
        for f in cf.as_completed(futs):
            try:
                results.append(f.result())
            except warren.WarrenError as e:
                results.append({"k": -1, "id": "-", "n": 0, "exit": None, "ok": False,
                                "out": f"error: {e}", "create_ms": 0, "total_ms": 0})
    wall = time.monotonic() - t0
    results.sort(key=lambda r: r["k"])
    print(f"{'#':>3}  {'sandbox':<20} {'N':>5} {'exit':>4} {'create':>8} {'total':>8}  output")
    for r in results:
        print(f"{r['k']:>3}  {r['id']:<20} {r['n']:>5} {str(r['exit']):>4} "
              f"{r['create_ms']:>6.1f}ms {r['total_ms']:>6.1f}ms  {'OK ' if r['ok'] else 'BAD'} {r['out']}")
    good = sum(r["ok"] for r in results)
    print(f"\n{good}/{len(results)} sandboxes correct; {len(results)} sandboxes created, used and "
          f"deleted in {wall:.2f}s with {args.workers} workers "
          f"({len(results) / wall:.1f} sandboxes/s)")
    left = client.list(labels={"demo": "batch"})
    if left:
        print(f"leaked sandboxes: {[s.id for s in left]}")
        return 1
    return 0 if good == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
