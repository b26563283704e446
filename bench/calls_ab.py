#!/usr/bin/python3
"""A/B of trivial Python calls between two builds, interleaved, because this host's speed drifts
by +-20% within minutes: a change is only visible against the build before it run beside it.

  sudo /usr/bin/python3 bench/calls_ab.py --a OLD_BUILD_DIR --b build [--rounds 5] [--seconds 6]
      [--clients 2] [--what python|cpp] --data-dir DIR

Each round starts `warren serve` from A, then from B (each BUILD_DIR holds warren, warren-agent
and warren-zygote.so), warms 30 calls per client, then runs closed-loop
`POST /v1/calls {"language": "python", "code": "print(1)"}` for --seconds with --clients
keep-alive clients, and prints calls/s, p50/p99 and the machine's busy CPU per call (from
/proc/stat: everything on the machine, the clients included). The medians per build close it.
`--what cpp` runs calls.py's C++ program instead, compiled in each call and run on 200 judged
cases: the rate is runs per second (cases, the compiles' time included), as calls.py's row
counts them, and the latency that of whole calls.
The runner image (bench-runner:1, as bench/calls.py builds it) must be in --data-dir: run
calls.py once with --keep --data-dir DIR first.
"""

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calls import CPP  # noqa: E402
from service import Api, log, start_server, stop_server, summary  # noqa: E402


def busy_ticks():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v) - v[3] - v[4]  # all but idle and iowait


CPP_CASES = 200


def body_of(what):
    if what == "python":
        return {"language": "python", "code": "print(1)"}, 1
    cases = [{"stdin": f"{i}\n", "expected": f"{i + 1}\n"} for i in range(CPP_CASES)]
    return {"language": "cpp", "code": CPP, "cases": cases}, CPP_CASES


def check(what, r):
    if what == "python":
        assert r["stdout"] == "1\n", r
    else:
        assert all(c["verdict"] == "passed" for c in r["cases"]), r


def one(build, data, seconds, clients, what):
    proc, port, token = start_server(data, ["--fncall-image", "bench-runner:1"], build=build)
    try:
        apis = [Api(port, token) for _ in range(clients)]
        body, runs_per_call = body_of(what)
        for a in apis:
            for _ in range(30 if what == "python" else 2):
                a.call("POST", "/v1/calls", body)
        lat = []

        def client(a):
            end = time.time() + seconds
            while time.time() < end:
                t0 = time.perf_counter()
                r = a.call("POST", "/v1/calls", body)
                lat.append(time.perf_counter() - t0)
                check(what, r)

        b0, t0 = busy_ticks(), time.time()
        threads = [threading.Thread(target=client, args=(a,)) for a in apis]
        [t.start() for t in threads]
        [t.join() for t in threads]
        elapsed, busy_ms = time.time() - t0, (busy_ticks() - b0) * 1000.0 / os.sysconf("SC_CLK_TCK")
        s = summary(lat)
        runs = len(lat) * runs_per_call
        return {"per_s": runs / elapsed, "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"],
                "cpu_ms_per_call": busy_ms / runs}
    finally:
        stop_server(proc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="build dir of A")
    ap.add_argument("--b", required=True, help="build dir of B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--what", choices=("python", "cpp"), default="python",
                    help="print(1) calls, or C++ runs (per judged case)")
    ap.add_argument("--data-dir", required=True, help="calls.py's --data-dir: holds data/ with bench-runner:1")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    runs = {"A": [], "B": []}
    for i in range(args.rounds):
        for name, build in (("A", args.a), ("B", args.b)):
            r = one(os.path.abspath(build), args.data_dir, args.seconds, args.clients, args.what)
            runs[name].append(r)
            log(f"round {i + 1} {name}: {r['per_s']:.1f}/s p50 {r['p50_ms']:.2f} ms "
                f"p99 {r['p99_ms']:.2f} ms cpu/run {r['cpu_ms_per_call']:.2f} ms")
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"{name} ({args.a if name == 'A' else args.b}): median {med['per_s']:.1f} {args.what} runs/s, "
              f"p50 {med['p50_ms']:.2f} ms, p99 {med['p99_ms']:.2f} ms, cpu/run {med['cpu_ms_per_call']:.2f} ms "
              f"(rates {[round(r['per_s'], 1) for r in rs]})")


if __name__ == "__main__":
    main()
