#!/usr/bin/env python3
"""Density (issue 27): idle Python sandboxes per GiB of node memory with reclaim and
hibernation against without, the wake latency of a hibernated sandbox, and what a busy
sandbox beside them loses.

One `warren serve` per configuration on this machine, the same image (Debian bookworm with
python3, built with mmdebstrap: --tree DIR to build it from a directory instead):
  without   --no-density: N idle agents; their footprint is what the node's cgroup holds
  with      --idle-after 2 --hibernate-after 6 (zram swap): the same N agents once hibernated;
            footprint = the node's cgroup plus the RAM of its zram device
Each agent is a Python process that imported a few modules and holds ~40 MiB of objects it
does not touch (records with text and numbers, as an agent's state is), then waits.

  idle per GiB   1 GiB / (footprint / N), both ways, and the ratio (target: 4x or more)
  wake           time of the first exec (`true`) on a hibernated sandbox, p50/p99, against the
                 same exec on an active one (target: p99 within 100 ms)
  busy           iterations/s of a Python loop over 64 MiB in one sandbox alone, and beside
                 the N agents while they are reclaimed and hibernated (target: no loss)

  sudo python3 bench/density.py [--count 32] [--tree DIR]
"""

import argparse
import concurrent.futures as cf
import os
import sys
import time

from benchlib import BenchError, WarrenServe, log, percentile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARREN = os.environ.get("WARREN_BIN", os.path.join(ROOT, "build", "warren"))
IMAGE = "bench-density:1"
# The busy loop's run while agents go idle (2 s) and hibernate (6 s), with a margin.
TRANSITION_SECONDS = 10

AGENT = r"""
import json, os, re, socket, subprocess, sqlite3, email.parser, urllib.request
state = [{"step": i, "role": "tool" if i % 3 else "assistant",
          "text": ("observation %d: " % i) * 12, "score": i * 0.5, "tags": ["a", "b", str(i)]}
         for i in range(60000)]
open("/tmp/agent.ready", "w").write(str(len(state)))
s = socket.socket(socket.AF_UNIX); s.bind("/tmp/agent.sock"); s.listen(4)
while True:
    c, _ = s.accept(); c.sendall(str(sum(r["step"] for r in state)).encode()); c.close()
"""
ASK = ("import socket; s=socket.socket(socket.AF_UNIX); s.connect('/tmp/agent.sock'); "
       "print(s.recv(64).decode())")
BUSY = r"""
import sys, time
b = bytearray(64 << 20)
end, n = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    for i in range(0, len(b), 4096):
        b[i] = (b[i] + 1) & 255
    n += 1
print(n / float(sys.argv[1]))
"""


class Serve(WarrenServe):
    def __init__(self, scratch, name, args):
        super().__init__(WARREN, scratch, f"density-{name}", args)

    def exec(self, sid, argv, timeout_s=600):
        return self.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": argv, "timeout_s": timeout_s})

    def density(self):
        return self.http("GET", "/v1/nodes")["nodes"][0]["density"]


def build_image(srv, tree):
    if tree:
        srv.cli("image", "build", IMAGE, "--from-dir", tree)
    else:
        srv.cli("image", "build", IMAGE, "--debian", "bookworm", "--packages", "python3")


def start_agents(srv, count):
    ids = [srv.http("POST", "/v1/sandboxes", {"image": IMAGE, "memory_mb": 256, "cpu": 1})["id"]
           for _ in range(count)]

    def start(sid):
        srv.http("POST", f"/v1/sandboxes/{sid}/exec",
                 {"argv": ["python3", "-c", AGENT], "timeout_s": 86400, "wait": False})
        for _ in range(600):
            if srv.exec(sid, ["test", "-e", "/tmp/agent.ready"])["exit_code"] == 0:
                return
            time.sleep(0.2)
        raise BenchError(f"agent in {sid} never got ready")
    with cf.ThreadPoolExecutor(4) as pool:
        list(pool.map(start, ids))
    return ids


def wait_for(pred, what, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise BenchError(f"timed out waiting for {what}")


def busy_rate(srv, sid, seconds):
    r = srv.exec(sid, ["python3", "-c", BUSY, str(seconds)], timeout_s=int(seconds) + 60)
    if r["exit_code"] != 0:
        raise BenchError(f"busy loop: {r}")
    return float(r["stdout"])


def busy_median(srv, sid, seconds, runs=3):
    """The busy loop's median rate over `runs` runs: one run varies by 10-15% on a 2-CPU host."""
    rates = sorted(busy_rate(srv, sid, seconds) for _ in range(runs))
    return rates[len(rates) // 2]


def busy_during_transition(srv, busy, count):
    """The busy loop's rate while `count` active agents go idle, are reclaimed and hibernate
    beside it: it runs from before they go idle (2 s) until after their page-out (6 s)."""
    with cf.ThreadPoolExecutor(1) as pool:
        during_f = pool.submit(busy_rate, srv, busy, TRANSITION_SECONDS)
        wait_for(lambda: srv.density()["sandboxes"].get("hibernated", 0) >= count, "the agents to hibernate")
        return during_f.result()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=32, help="idle agents per configuration")
    ap.add_argument("--tree", help="a Debian rootfs with python3 (else built with mmdebstrap)")
    ap.add_argument("--busy-seconds", type=float, default=10)
    ap.add_argument("--scratch", default="/var/tmp")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    mib = 1 << 20
    results = {}
    for name, args in (("without", ["--no-density"]),
                       ("with", ["--idle-after", "2", "--hibernate-after", "6", "--swap", "zram:4G"])):
        srv = Serve(a.scratch, name, args)
        try:
            log(f"[{name}] image")
            build_image(srv, a.tree)
            busy = srv.http("POST", "/v1/sandboxes", {"image": IMAGE, "memory_mb": 512, "cpu": 1})["id"]
            alone = busy_median(srv, busy, a.busy_seconds)
            log(f"[{name}] {a.count} agents")
            ids = start_agents(srv, a.count)
            if name == "with":
                # The busy one runs while the agents go idle and hibernate beside it, and again
                # once they all have.
                durings = [busy_during_transition(srv, busy, a.count)]
                time.sleep(2)  # the last page-outs settle
            else:
                time.sleep(8)
                durings = []
            beside = busy_median(srv, busy, a.busy_seconds)
            d = srv.density()
            # The busy sandbox's own 64 MiB was freed when its loop ended; what is left is the agents'.
            footprint = d["used_bytes"] / a.count
            res = {"footprint_mib": footprint / mib, "per_gib": (1 << 30) / footprint,
                   "busy_alone": alone, "busy_during": sorted(durings)[len(durings) // 2] if durings else None,
                   "durings": durings, "busy_beside": beside, "swap": d["swap"]}
            if name == "with":
                wakes = []
                for sid in ids:
                    t0 = time.monotonic()
                    r = srv.exec(sid, ["true"])
                    wakes.append(time.monotonic() - t0)
                    if r["exit_code"] != 0:
                        raise BenchError(f"exec after wake: {r}")
                active = []
                for sid in ids[:16]:
                    t0 = time.monotonic()
                    srv.exec(sid, ["true"])
                    active.append(time.monotonic() - t0)
                # Their state survived: every agent answers.
                for sid in ids:
                    r = srv.exec(sid, ["python3", "-c", ASK])
                    if r["exit_code"] != 0 or not r["stdout"].strip():
                        raise BenchError(f"agent lost its state: {r}")
                # Every agent is active again with all its records in RAM (the answer reads them
                # all): twice more, they go idle and hibernate while the busy one runs.
                for cycle in range(2):
                    durings.append(busy_during_transition(srv, busy, a.count))
                    if cycle == 0:
                        for sid in ids:
                            srv.exec(sid, ["python3", "-c", ASK])
                wakes.sort()
                active.sort()
                res.update(wake_p50_ms=percentile(wakes, 50) * 1e3, wake_p99_ms=percentile(wakes, 99) * 1e3,
                           active_p50_ms=percentile(active, 50) * 1e3, node_wake_p99_ms=srv.density()["wake_p99_ms"])
            results[name] = res
            for sid in ids + [busy]:
                srv.http("DELETE", f"/v1/sandboxes/{sid}")
        finally:
            srv.stop()
    wo, w = results["without"], results["with"]
    print(f"\nDensity: {a.count} idle Python agents (~40 MiB of objects each), {os.cpu_count()} CPUs")
    print(f"{'':22}{'without':>12}{'with':>12}")
    print(f"{'footprint / agent':22}{wo['footprint_mib']:>10.1f} M{w['footprint_mib']:>10.1f} M")
    print(f"{'idle agents per GiB':22}{wo['per_gib']:>12.1f}{w['per_gib']:>12.1f}"
          f"   {w['per_gib'] / wo['per_gib']:.2f}x (target >= 4x)")
    sw = w["swap"]
    print(f"{'zram':22}{'':>12}{sw['used_bytes'] / mib:>10.0f} M in {sw['ram_bytes'] / mib:.0f} M of RAM")
    print(f"{'wake (first exec)':22}{'':>12}  p50 {w['wake_p50_ms']:.1f} ms  p99 {w['wake_p99_ms']:.1f} ms"
          f" (target p99 <= 100 ms); exec on an active one p50 {w['active_p50_ms']:.1f} ms;"
          f" thaw p99 {w['node_wake_p99_ms']:.2f} ms")
    for k, r in (("without", wo), ("with", w)):
        during = ""
        if r["busy_during"] is not None:
            each = ", ".join(f"{x / r['busy_alone']:.2f}x" for x in r["durings"])
            during = (f"; while they are reclaimed {r['busy_during']:.0f}/s"
                      f" ({r['busy_during'] / r['busy_alone']:.2f}x, median of {each})")
        print(f"{'busy loop ' + k:22}{r['busy_alone']:>8.0f}/s alone, {r['busy_beside']:.0f}/s beside idle agents"
              f" ({r['busy_beside'] / r['busy_alone']:.2f}x){during}")

if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
