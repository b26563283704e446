#!/usr/bin/python3
"""Snapshot and fork (issue 30): snapshot time against the size of what changed, and forks of
1, 10 and 100 container sandboxes against plain creates of as many, in the same run.

  sudo /usr/bin/python3 bench/snapshot.py [--sizes 0,1,10,100] [--forks 1,10,100]
                                          [--vm-forks 1,2,4] [--reps 3] [--json out.json]

Starts its own `warren serve` (build/warren; --no-network --no-microvm) with a scratch data
dir under /var/tmp and a busybox image, and measures:

  snapshot   POST .../snapshot of a sandbox that wrote SIZE MiB (one file of random bytes,
             plus 1,000 small files): median of --reps; against what a user would do without
             it in the same run: the changed tree as a tar (GET .../archive) uploaded as a
             layer (POST /v1/layers), the whole copy through the client
  fork       POST .../fork {"count": N} of a sandbox that wrote 10 MiB, until every child
             runs; against POST /v1/sandboxes:batch of N plain sandboxes of the same image
             (the target: a fork of 100 within 2x of 100 creates). Children share one blob:
             its size is stored once, where a copy per child would take N times it.
  vm fork    the same for microVMs (a second server, with its microVM backend; TCG here):
             a fork of N, which carries the parent's memory and processes (one capture, then
             N restores of it), against a batch of N plain microVM creates, which restore the
             node's template and take its warm pool first (the target: within 2x of those).
             Both start with the warm pool full. The capture is held once for all children
             (its zero pages are holes); N copies of the guest's RAM would take N times it.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import Api, build_busybox_image, log, start_server, stop_server  # noqa: E402

IMAGE = "bench-snap:1"


def raw(port, token, method, path, body=None, content_type="application/json"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    c.request(method, path, body=body, headers={"Authorization": "Bearer " + token,
                                                 "Content-Type": content_type})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status >= 300:
        raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
    return data


def write_changes(api, sid, mib):
    cmd = (f"head -c {mib << 20} /dev/urandom > /root/blob && mkdir -p /root/small && "
           "i=0; while [ $i -lt 1000 ]; do echo $i > /root/small/f$i; i=$((i+1)); done")
    r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", cmd], "timeout_s": 600})
    assert r["exit_code"] == 0, r


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def bench_snapshot(api, port, token, mib, reps):
    sb = api.call("POST", "/v1/sandboxes", {"image": IMAGE, "disk_mb": max(256, mib * 2 + 64)})
    sid = sb["id"]
    try:
        write_changes(api, sid, mib)
        snap, whole, size, tar = [], [], 0, b""
        for i in range(reps):
            t0 = time.perf_counter()
            layer = api.call("POST", f"/v1/sandboxes/{sid}/snapshot", {"tag": f"bench-snap-{mib}:{i}"})
            snap.append(time.perf_counter() - t0)
            size = layer["size"]
            # Without snapshots: the changed tree out as a tar, and in again as a layer (the
            # archive API answers at most 64 MiB).
            if mib >= 60:
                continue
            t0 = time.perf_counter()
            tar = raw(port, token, "GET", f"/v1/sandboxes/{sid}/archive?path=/root")
            raw(port, token, "POST", f"/v1/layers?name=bench-tar-{mib}&tag={i}&kind=workspace", tar,
                "application/x-tar")
            whole.append(time.perf_counter() - t0)
        return {"changed_mib": mib, "snapshot_s": median(snap), "layer_bytes": size,
                "archive_and_upload_s": median(whole), "tar_bytes": len(tar)}
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sid}")


VM_SPEC = {"backend": "microvm", "memory_mb": 256, "cpu": 1, "disk_mb": 256}


def wait_warm(api, timeout=180):
    """Until the node's microVM warm pool is full again (it refills in the background, and
    would compete for the CPU with what is measured)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        vm = api.call("GET", "/v1/nodes")["nodes"][0].get("microvm", {})
        if vm.get("warm_ready", 0) >= vm.get("warm_pool", 0):
            return
        time.sleep(0.5)
    log("the warm pool did not fill up: measuring anyway")


def bench_fork(api, n, spec=None):
    spec = dict(spec or {"memory_mb": 64}, image=IMAGE)
    vm = spec.get("backend") == "microvm"
    parent = api.call("POST", "/v1/sandboxes", spec)["id"]
    try:
        write_changes(api, parent, 10)
        if vm:
            wait_warm(api)
        t0 = time.perf_counter()
        r = api.call("POST", f"/v1/sandboxes/{parent}/fork", {"count": n})
        fork_s = time.perf_counter() - t0
        kids = [s["id"] for s in r["sandboxes"]]
        assert len(kids) == n and all(s["state"] == "running" for s in r["sandboxes"])
        for sid in kids:
            api.call("DELETE", f"/v1/sandboxes/{sid}")
        if vm:
            wait_warm(api)
        t0 = time.perf_counter()
        b = api.call("POST", "/v1/sandboxes:batch", {"count": n, "spec": spec})
        create_s = time.perf_counter() - t0
        assert not b["errors"], b["errors"][:2]
        for s in b["sandboxes"]:
            api.call("DELETE", f"/v1/sandboxes/{s['id']}")
        snap, mem = r.get("snapshot") or {}, r.get("memory") or {}
        return {"count": n, "fork_s": fork_s, "snapshot_s": snap.get("seconds", 0.0),
                "creates_s": create_s, "ratio": fork_s / create_s,
                "shared_layer_bytes": snap.get("size", 0),
                "copies_would_take_bytes": snap.get("size", 0) * n,
                "memory": bool(mem), "capture_s": mem.get("capture_seconds", 0.0),
                "paused_s": mem.get("paused_seconds", 0.0),
                "capture_bytes": mem.get("ram_bytes", 0)}
    finally:
        api.call("DELETE", f"/v1/sandboxes/{parent}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="0,1,10,100", help="MiB written before each snapshot")
    ap.add_argument("--forks", default="1,10,100")
    ap.add_argument("--vm-forks", default="1,2,4", help="microVM forks (empty: none)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/snapshot.py: run as root")
    tmp = tempfile.mkdtemp(prefix="warren-bench-snapshot-", dir="/var/tmp")
    proc, port, token = start_server(tmp, ["--no-network", "--no-microvm"])
    out = {"snapshot": [], "fork": [], "vm_fork": []}
    try:
        build_busybox_image(tmp, port, token, IMAGE)
        api = Api(port, token)
        print(f"{'changed':>9} {'snapshot':>10} {'layer':>10} | {'tar+upload':>10} {'tar':>10}")
        for mib in [int(x) for x in args.sizes.split(",") if x]:
            r = bench_snapshot(api, port, token, mib, args.reps)
            out["snapshot"].append(r)
            print(f"{mib:>6} MiB {r['snapshot_s'] * 1000:>8.0f}ms {r['layer_bytes'] / 2**20:>7.1f}MiB | "
                  + (f"{r['archive_and_upload_s'] * 1000:>8.0f}ms {r['tar_bytes'] / 2**20:>7.1f}MiB"
                     if r["tar_bytes"] else "  (over the archive API's 64 MiB)"))
        print(f"\n{'fork of':>8} {'fork':>9} {'(snapshot)':>11} | {'creates':>9} {'ratio':>6} | shared layer")
        for n in [int(x) for x in args.forks.split(",") if x]:
            r = bench_fork(api, n)
            out["fork"].append(r)
            print(f"{n:>8} {r['fork_s'] * 1000:>7.0f}ms {r['snapshot_s'] * 1000:>9.0f}ms | "
                  f"{r['creates_s'] * 1000:>7.0f}ms {r['ratio']:>5.2f}x | "
                  f"{r['shared_layer_bytes'] / 2**20:.1f} MiB once (copies: "
                  f"{r['copies_would_take_bytes'] / 2**20:.0f} MiB)")
    finally:
        stop_server(proc)
        log(f"data in {tmp} (removed)")
        os.system(f"rm -rf {tmp}")
    vm_forks = [int(x) for x in args.vm_forks.split(",") if x]
    if vm_forks:
        tmp = tempfile.mkdtemp(prefix="warren-bench-snapshot-vm-", dir="/var/tmp")
        proc, port, token = start_server(tmp, ["--no-network"])
        try:
            build_busybox_image(tmp, port, token, IMAGE)
            api = Api(port, token)
            print(f"\n{'vm fork':>8} {'fork':>9} {'(capture':>9} {'paused)':>8} | {'creates':>9} "
                  f"{'ratio':>6} | memory held once")
            for n in vm_forks:
                r = bench_fork(api, n, VM_SPEC)
                out["vm_fork"].append(r)
                guest = (VM_SPEC["memory_mb"] + 192) << 20
                print(f"{n:>8} {r['fork_s'] * 1000:>7.0f}ms {r['capture_s'] * 1000:>7.0f}ms "
                      f"{r['paused_s'] * 1000:>6.0f}ms | {r['creates_s'] * 1000:>7.0f}ms "
                      f"{r['ratio']:>5.2f}x | {r['capture_bytes'] / 2**20:.0f} MiB "
                      f"(copies of the guest's RAM: {guest * n / 2**20:.0f} MiB)"
                      + ("" if r["memory"] else "  FILES ONLY"))
        finally:
            stop_server(proc)
            os.system(f"rm -rf {tmp}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
