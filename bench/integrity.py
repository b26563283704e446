#!/usr/bin/env python3
"""Integrity costs (issue 23): the tamper report and a filesystem policy change, each next to
what a user would do instead, in the same run.

    sudo /usr/bin/python3 bench/integrity.py [--files 20000] [--changed 2000] [--rounds 10]

It starts its own `warren serve` (build/warren, a scratch dir under /var/tmp, --no-network
--no-microvm --warm-pool 0), builds a base image of busybox plus FILES files of 4 KiB under
/usr/share/bench (a stand-in for a Python image's /usr), makes one sandbox, and in it:
- a "setup stage": CHANGED new files under /usr/local/lib/pkg, 100 base files modified;
- the report, `GET /v1/sandboxes/{id}/changes`, ROUNDS times, next to hashing the whole root
  inside the sandbox (`find / -xdev -type f | xargs sha256sum`, what a grader would otherwise
  run to see what changed, against a list it made before) and a tar of the image's trees (a copy);
- the stage change `PUT .../filesystem {"read_only": ["/"], "writable": ["/tmp"]}` and back
  to `{}`, ROUNDS times each, with no writer and then with 10 processes holding files of /usr
  open for writing (each change severs them), next to `POST .../pause` + `resume` (the floor
  of any stop-the-world change: the freeze and thaw alone).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import Api, log, start_server, stop_server  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(fn, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def row(name, samples, note=""):
    s = sorted(samples)
    p50 = statistics.median(s)
    print(f"| {name} | {p50:.1f} | {s[-1]:.1f} | {len(s)} | {note} |")
    return p50


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--changed", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="warren-bench-integrity-", dir="/var/tmp")
    proc = None
    try:
        root = os.path.join(tmp, "rootfs")
        subprocess.run([os.path.join(REPO, "scripts/make-busybox-rootfs.sh"), root], check=True, capture_output=True)
        blob = os.urandom(4096)
        for i in range(args.files):
            d = os.path.join(root, "usr/share/bench", f"d{i // 500}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"f{i}"), "wb") as f:
                f.write(blob[: 1024 + i % 3072])
        proc, port, token = start_server(tmp, ["--no-network", "--no-microvm", "--warm-pool", "0"])
        env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{port}", WARREN_TOKEN=token)
        subprocess.run([os.path.join(REPO, "build/warren"), "image", "build", "bench-int:1", "--from-dir", root],
                       check=True, capture_output=True, env=env)
        api = Api(port, token)
        sid = api.call("POST", "/v1/sandboxes", {"image": "bench-int:1", "disk_mb": 2048})["id"]
        sh = lambda cmd: api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", cmd], "timeout_s": 600})
        r = sh(f"mkdir -p /usr/local/lib/pkg && cd /usr/local/lib/pkg && i=0; while [ $i -lt {args.changed} ]; do "
               f"echo $i > f$i; i=$((i+1)); done; for f in $(ls /usr/share/bench/d0 | head -100); do "
               f"echo x >> /usr/share/bench/d0/$f; done; echo ok")
        assert r["stdout"] == "ok\n", r
        n = len(api.call("GET", f"/v1/sandboxes/{sid}/changes?limit=100000")["changes"])
        log(f"{n} changes after the setup stage")

        print(f"\n{args.files} image files, {n} changes; {args.rounds} rounds; ms\n")
        print("| operation | p50 | max | n | note |\n|---|---|---|---|---|")
        rep = row("GET .../changes (the tamper report)",
                  timed(lambda: api.call("GET", f"/v1/sandboxes/{sid}/changes?limit=100000"), args.rounds),
                  f"{n} entries")
        hashing = row("sha256 of every file of the root, inside the sandbox",
                      timed(lambda: sh("find / -xdev -type f | xargs sha256sum > /dev/null"), 3),
                      "what a grader runs instead (and needs a list made before)")
        tar = lambda: sh("tar -cf - /bin /etc /root /usr 2>/dev/null | wc -c")
        assert int(tar()["stdout"]) > args.files * 1024, "the tar baseline read less than the image"
        row("tar of the image's trees, inside the sandbox", timed(tar, 3), "a copy to diff against")
        print(f"\nreport / hashing: {rep / hashing:.4f}\n")

        ro = {"read_only": ["/"], "writable": ["/tmp"]}
        on, off = [], []
        for _ in range(args.rounds):
            on += timed(lambda: api.call("PUT", f"/v1/sandboxes/{sid}/filesystem", ro), 1)
            off += timed(lambda: api.call("PUT", f"/v1/sandboxes/{sid}/filesystem", {}), 1)
        print("| operation | p50 | max | n | note |\n|---|---|---|---|---|")
        p_on = row("PUT .../filesystem: / read-only but /tmp", on, "no writer")
        row("PUT .../filesystem: {} (all writable)", off, "clears every flag")
        holders = []
        for i in range(10):
            holders.append(api.call("POST", f"/v1/sandboxes/{sid}/exec",
                                    {"argv": ["sh", "-c", f"exec 3<> /usr/share/bench/d1/f{500 + i}; sleep 600"],
                                     "wait": False, "timeout_s": 900})["exec_id"])
        time.sleep(0.5)
        sev = []
        for _ in range(args.rounds):
            sev += timed(lambda: api.call("PUT", f"/v1/sandboxes/{sid}/filesystem", ro), 1)
            api.call("PUT", f"/v1/sandboxes/{sid}/filesystem", {})
        row("PUT .../filesystem with 10 files open for writing", sev, "each change severs 10 files")
        pr = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            api.call("POST", f"/v1/sandboxes/{sid}/pause")
            api.call("POST", f"/v1/sandboxes/{sid}/resume")
            pr.append((time.perf_counter() - t0) * 1000)
        floor = row("POST .../pause + resume", pr, "the freeze and thaw alone")
        print(f"\npolicy change / pause+resume: {p_on / floor:.2f}")
        for h in holders:
            api.call("POST", f"/v1/sandboxes/{sid}/execs/{h}/signal", {"signal": "KILL"})
        api.call("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        if proc:
            stop_server(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
