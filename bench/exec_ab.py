#!/usr/bin/python3
"""A/B of the exec round trip (or create -> first exec, or cycles/s) between two builds, in one run.

  sudo /usr/bin/python3 bench/exec_ab.py --a OLD_BUILD_DIR --b build [--rounds 6] [--execs 1000]
  sudo /usr/bin/python3 bench/exec_ab.py --a OLD --b build --what create [--execs 300]
  sudo /usr/bin/python3 bench/exec_ab.py --a OLD --b build --what cold [--execs 200]
  sudo /usr/bin/python3 bench/exec_ab.py --a OLD --b build --what cycles [--clients 2] [--seconds 10]

Starts one `warren serve` from each build dir (`warren` and `warren-agent` in it; a scratch
data dir under /var/tmp, loopback, --no-microvm --no-network), makes a busybox sandbox on each
and runs 1,200 execs of `true` there first, so each sandbox keeps its full 1,024 exec records as
a long-lived one does. Then, alternating A and B, `--rounds` rounds of `--execs` timed execs
each, printing each round's p50 and at the end the median of the rounds' p50s per build and
how many rounds B won. Alternating rounds are what make a difference of 1% visible on a host
whose speed drifts by more than that within minutes. Everything it made goes at the end.

`--what create` times issue 28's second row instead: POST /v1/sandboxes, then the first exec
of `true` in it, from the create's start to the exec's result; the delete is not timed. Each
cycle then waits until the node's warm pool is full again (`/v1/nodes`), so a round measures
the path a claimed sandbox takes, not a refill racing it. `--what cold` times the same with
no warm pool (`--warm-pool 0`): every create makes its sandbox, as a refill or a burst does.
`--what cycles` counts issue 28's third row instead: create -> exec of `true` -> delete from
`--clients` clients (default 2) for `--seconds` per round (default 10), in cycles/s (higher is
better), after 2 s of the same to warm up.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import Api, build_busybox_image, start_server, stop_server  # noqa: E402

IMAGE = "bench:busybox"


def exec_once(api, sid, k):
    t0 = time.perf_counter()
    r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
    dt = (time.perf_counter() - t0) * 1000
    if r.get("exit_code") != 0:
        raise RuntimeError(f"exec true on {k}: {r}")
    return dt


def pool_full(api):
    for n in api.call("GET", "/v1/nodes").get("nodes", []):
        w = n.get("warm_pool") or {}
        if w.get("making", 0) or w.get("ready", 0) < w.get("target", 0):
            return False
    return True


def timed_create_exec(api, k):
    """Create -> first exec of `true` in it, in ms; the delete after is not timed."""
    t0 = time.perf_counter()
    sid = api.call("POST", "/v1/sandboxes", {"image": IMAGE})["id"]
    r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
    dt = (time.perf_counter() - t0) * 1000
    api.call("DELETE", f"/v1/sandboxes/{sid}")
    if r.get("exit_code") != 0:
        raise RuntimeError(f"exec true on {k}: {r}")
    return dt


def create_cycle(api, _sid, k):
    deadline = time.monotonic() + 30
    while not pool_full(api):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm pool of {k} did not refill in 30 s")
        time.sleep(0.005)
    time.sleep(0.02)  # the filler's last sandbox settles (its agent's first page faults)
    return timed_create_exec(api, k)


def cold_cycle(api, _sid, k):
    time.sleep(0.02)  # the last delete's teardown settles
    return timed_create_exec(api, k)


def cycles_per_s(api_of, clients, seconds):
    """create -> exec `true` -> delete from `clients` threads: cycles/s over `seconds`."""
    stop = threading.Event()
    counts = [0] * clients
    errors = []

    def client(k):
        api = api_of()
        try:
            while not stop.is_set():
                sid = api.call("POST", "/v1/sandboxes", {"image": IMAGE})["id"]
                r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
                api.call("DELETE", f"/v1/sandboxes/{sid}")
                if r.get("exit_code") != 0:
                    raise RuntimeError(f"exec true: {r}")
                counts[k] += 1
        except Exception as e:  # reported by the caller, the round is void
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    time.sleep(2)  # warm-up: the pool and the threads in their stride
    c0, t0 = sum(counts), time.perf_counter()
    time.sleep(seconds)
    c1, t1 = sum(counts), time.perf_counter()
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return (c1 - c0) / (t1 - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="build dir of A (the old one)")
    ap.add_argument("--b", required=True, help="build dir of B (the new one)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--execs", type=int, default=1000, help="timed execs (or cycles) per round")
    ap.add_argument("--what", choices=("exec", "create", "cold", "cycles"), default="exec",
                    help="exec: the round trip of `true`; create: create -> first exec result, "
                         "from the warm pool; cold: the same without one; cycles: create -> "
                         "exec -> delete cycles/s")
    ap.add_argument("--clients", type=int, default=2, help="--what cycles: clients at once")
    ap.add_argument("--seconds", type=float, default=10, help="--what cycles: length of a round")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/exec_ab.py: run as root")
    builds = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    servers = {}
    try:
        for k, build in builds.items():
            tmp = tempfile.mkdtemp(prefix=f"warren-bench-exec-ab-{k}-", dir="/var/tmp")
            servers[k] = {"tmp": tmp}
            extra = ["--warm-pool", "0"] if args.what == "cold" else []
            proc, port, token = start_server(tmp, ["--no-microvm", "--no-network", *extra], build=build)
            servers[k]["proc"] = proc
            build_busybox_image(tmp, port, token, IMAGE)
            api = Api(port, token)
            sid = api.call("POST", "/v1/sandboxes", {"image": IMAGE})["id"]
            servers[k].update(api=api, sid=sid, port=port, token=token)
            for _ in range(1200):
                api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        if args.what == "cycles":
            return compare_cycles(servers, builds, args)
        p50s = {k: [] for k in builds}
        one = {"exec": exec_once, "create": create_cycle, "cold": cold_cycle}[args.what]
        for rnd in range(args.rounds):
            for k in builds:
                api, sid = servers[k]["api"], servers[k]["sid"]
                samples = [one(api, sid, k) for _ in range(args.execs)]
                p50s[k].append(statistics.median(samples))
                print(f"round {rnd} {k}: p50 {p50s[k][-1]:.3f} ms", flush=True)
        wins = sum(b < a for a, b in zip(p50s["A"], p50s["B"]))
        for k, build in builds.items():
            print(f"{k} ({build}): median of round p50s {statistics.median(p50s[k]):.3f} ms")
        print(f"B faster in {wins} of {args.rounds} rounds")
    finally:
        for s in servers.values():
            if "api" in s:
                try:
                    s["api"].call("DELETE", f"/v1/sandboxes/{s['sid']}")
                except Exception as e:  # the server is going anyway; say why
                    print(f"delete {s['sid']}: {e}", file=sys.stderr)
            if "proc" in s:
                stop_server(s["proc"])
            shutil.rmtree(s["tmp"], ignore_errors=True)


def compare_cycles(servers, builds, args):
    rates = {k: [] for k in builds}
    for rnd in range(args.rounds):
        for k in builds:
            port, token = servers[k]["port"], servers[k]["token"]
            rates[k].append(cycles_per_s(lambda: Api(port, token), args.clients, args.seconds))
            print(f"round {rnd} {k}: {rates[k][-1]:.1f} cycles/s", flush=True)
    wins = sum(b > a for a, b in zip(rates["A"], rates["B"]))
    for k, build in builds.items():
        print(f"{k} ({build}): median of rounds {statistics.median(rates[k]):.1f} cycles/s")
    print(f"B faster in {wins} of {args.rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
