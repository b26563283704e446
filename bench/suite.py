#!/usr/bin/python3
"""Speed and density, one command: Warren next to crun, bubblewrap and a plain fork+exec.

  sudo /usr/bin/python3 bench/suite.py [--quick] [--density 5000] [--burst 1000]
                                       [--json out.json] [--markdown RESULTS.md]

Starts its own `warren serve` (build/warren; private data dir under /var/tmp, loopback port,
no microVMs, sandbox networking off so it never touches the host's bridge or firewall: every
sandbox still gets a network namespace of its own with only lo), then runs, in this order:

  cycle     bench/cycle.py against that server and, in the same run, crun, bwrap and
            fork+exec: create -> first exec of `true` -> delete, 1 and 2 clients.
  exec      the round trip of `true` in a running sandbox through the API, against a host
            fork+exec of the same busybox `true`.
  burst     N creates sent at once on N connections (all must succeed: queued, not refused),
            the latency distribution, then the teardown of all N with 16 concurrent deletes.
  density   N idle sandboxes (batches of 500): host memory per sandbox (MemAvailable, and where
            it goes: slab, page tables, kernel stacks, per-CPU, the agents' own pages),
            the daemon's memory and fds, GET and exec latency with all N alive, then the
            teardown. The same memory figure for K idle `bwrap --unshare-all ... sleep` in the
            same run. It also prints where the limit comes from.

Prints one table with the goals of issue #9 and the ratios Warren / baseline. Everything it
made is removed at the end (sandboxes, the server, its data dir, the bwrap processes).
Root, Debian's /usr/bin/python3, standard library only; needs crun, bubblewrap,
busybox-static and erofs-utils (scripts/install-deps.sh installs them).
"""

import argparse
import http.client
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchlib import log, percentile  # noqa: E402
from service import Api, build_busybox_image, start_server  # noqa: E402

IMAGE = "bench:busybox"


def pcts(samples_ms):
    s = sorted(samples_ms)
    return {"n": len(s), "p50_ms": percentile(s, 50), "p90_ms": percentile(s, 90),
            "p99_ms": percentile(s, 99), "max_ms": s[-1] if s else float("nan")}


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            out[k] = int(v.split()[0])  # KiB
    return out


def slab_kib(name):
    with open("/proc/slabinfo") as f:
        for line in f.readlines()[2:]:
            p = line.split()
            if p[0] == name:
                return int(p[1]) * int(p[3]) / 1024
    return 0.0


def settle():
    """Lets the kernel finish deferred frees (RCU, namespace cleanup) before a reading."""
    time.sleep(2)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")  # reclaimable slab (dentries, inodes): not what a sandbox costs
    time.sleep(1)


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


# --- cycle -----------------------------------------------------------------------------------

def run_cycle(port, token, iterations, out_json):
    env = dict(os.environ, WARREN_TOKEN=token)
    cmd = [sys.executable, os.path.join(HERE, "cycle.py"), "--url", f"http://127.0.0.1:{port}",
           "--iterations", str(iterations), "--json", out_json, "--phases", "--image", IMAGE]
    log("cycle: " + " ".join(cmd[1:]))
    r = subprocess.run(cmd, env=env)
    with open(out_json) as f:
        doc = json.load(f)
    if r.returncode != 0:
        log(f"cycle.py exited with {r.returncode}; its failed rows are marked in its table")
    return doc["results"]


def cycle_row(rows, system, phase, clients):
    for r in rows:
        if r.get("system") == system and r.get("phase") == phase and r.get("clients") == clients and "p50_ms" in r:
            return r
    return None


# --- exec round trip -------------------------------------------------------------------------

def run_exec(port, token, busybox_true, n):
    api = Api(port, token)
    sid = api.call("POST", "/v1/sandboxes", {"image": IMAGE})["id"]
    try:
        samples = []
        for i in range(n + 20):
            t0 = time.perf_counter()
            r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
            dt = (time.perf_counter() - t0) * 1000
            if r["exit_code"] != 0:
                raise RuntimeError(f"exec true: {r}")
            if i >= 20:
                samples.append(dt)
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sid}")
    fork, spawn = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([busybox_true])
        fork.append((time.perf_counter() - t0) * 1000)
    # The floor itself: posix_spawn + wait of the same binary, no subprocess machinery.
    for _ in range(n):
        t0 = time.perf_counter()
        pid = os.posix_spawn(busybox_true, [busybox_true], {})
        os.waitpid(pid, 0)
        spawn.append((time.perf_counter() - t0) * 1000)
    # The API's own floor: the same client's round trip of the cheapest request (no auth, no
    # state, no hop off the I/O thread). An exec over HTTP costs at least this plus the spawn.
    api_rtt = []
    for _ in range(n):
        t0 = time.perf_counter()
        api.call("GET", "/healthz")
        api_rtt.append((time.perf_counter() - t0) * 1000)
    return {"warren": pcts(samples), "fork": pcts(fork), "spawn": pcts(spawn), "api_rtt": pcts(api_rtt)}


# --- calls (fncall) --------------------------------------------------------------------------

def run_calls(iterations, runner_dir):
    """bench/calls.py (its own `warren serve` with the fncall runner image) and its baselines:
    its rows by name."""
    out = tempfile.mktemp(prefix="warren-bench-calls-", suffix=".json", dir="/var/tmp")
    cmd = [sys.executable, os.path.join(HERE, "calls.py"), "--iterations", str(iterations),
           "--json", out]
    if runner_dir:
        cmd += ["--data-dir", runner_dir]  # its runner image, built once and kept
    log("calls: " + " ".join(cmd[1:]))
    try:
        subprocess.run(cmd, check=True)
        with open(out) as f:
            return {r["name"]: r for r in json.load(f)}
    finally:
        if os.path.exists(out):
            os.unlink(out)


# --- burst -----------------------------------------------------------------------------------

def run_burst(port, token, n):
    conns = []
    for _ in range(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.connect()
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(c)
    h = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    body = json.dumps({"image": IMAGE, "labels": {"bench": "burst"}})
    lat, ids, errors = [None] * n, [None] * n, []
    go = threading.Barrier(n + 1)

    def one(k):
        go.wait()
        t0 = time.perf_counter()
        try:
            conns[k].request("POST", "/v1/sandboxes", body=body, headers=h)
            r = conns[k].getresponse()
            data = r.read()
            lat[k] = (time.perf_counter() - t0) * 1000
            if r.status == 201:
                ids[k] = json.loads(data)["id"]
            else:
                errors.append(f"{r.status} {data[:200]!r}")
        except Exception as e:  # noqa: BLE001 - counted and reported
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for c in conns:
        c.close()
    made = [i for i in ids if i]
    teardown = delete_all(port, token, made)
    return {"n": n, "ok": len(made), "errors": len(errors), "first_errors": errors[:3], "wall_s": wall,
            "per_s": len(made) / wall if wall else 0, "latency": pcts([x for x in lat if x is not None]),
            "teardown_s": teardown}


def delete_all(port, token, ids, workers=16):
    todo = list(ids)
    lock = threading.Lock()

    def worker():
        api = Api(port, token)
        while True:
            with lock:
                if not todo:
                    return
                sid = todo.pop()
            api.call("DELETE", f"/v1/sandboxes/{sid}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(min(workers, max(1, len(ids))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


# --- density ---------------------------------------------------------------------------------

KERNEL_FIELDS = ("Slab", "SUnreclaim", "PageTables", "KernelStack", "Percpu", "AnonPages", "Shmem")


def run_density(port, token, server_pid, n, chunk=500):
    api = Api(port, token)
    settle()
    m0, k1k0 = meminfo(), slab_kib("kmalloc-1k")
    ids, marks = [], []
    t0 = time.perf_counter()
    while len(ids) < n:
        k = min(chunk, n - len(ids))
        r = api.call("POST", "/v1/sandboxes:batch", {"count": k, "spec": {"image": IMAGE, "memory_mb": 64,
                                                                          "labels": {"bench": "density"}}})
        ids += [s["id"] for s in r["sandboxes"]]
        if r["errors"]:
            log(f"density: {len(r['errors'])} creates failed, first: {r['errors'][0]}")
            break
        marks.append((len(ids), meminfo()["MemAvailable"], slab_kib("kmalloc-1k")))
        log(f"density: {len(ids)} idle sandboxes")
    create_s = time.perf_counter() - t0
    settle()
    m1, k1k1 = meminfo(), slab_kib("kmalloc-1k")
    live = len(ids)
    per = {"MemAvailable": (m0["MemAvailable"] - m1["MemAvailable"]) / max(1, live)}
    for k in KERNEL_FIELDS:
        per[k] = (m1.get(k, 0) - m0.get(k, 0)) / max(1, live)
    per["kmalloc-1k"] = (k1k1 - k1k0) / max(1, live)
    # The marginal cost: the last chunk against the first (it grows with the count, see below).
    marginal = []
    for (na, ma, ka), (nb, mb, kb) in zip(marks, marks[1:]):
        marginal.append({"at": nb, "kib_per_sandbox": (ma - mb) / (nb - na), "kmalloc_1k_kib": (kb - ka) / (nb - na)})
    st = proc_status(server_pid)
    fds = len(os.listdir(f"/proc/{server_pid}/fd"))
    # The daemon stays responsive with all of them alive.
    probe = ids[len(ids) // 2]
    gets, execs = [], []
    for i in range(200):
        t = time.perf_counter()
        api.call("GET", f"/v1/sandboxes/{ids[(i * 7919) % live]}")
        gets.append((time.perf_counter() - t) * 1000)
    for i in range(100):
        t = time.perf_counter()
        api.call("POST", f"/v1/sandboxes/{probe}/exec", {"argv": ["true"]})
        execs.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    listed = api.call("GET", "/v1/sandboxes?label=bench=density")
    list_ms = (time.perf_counter() - t) * 1000
    teardown = delete_all(port, token, ids)
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    return {"n": n, "live": live, "create_s": create_s, "per_sandbox_kib": per, "marginal": marginal,
            "mem_available_kib_before": m0["MemAvailable"], "daemon_rss_kib": int(st["VmRSS"].split()[0]),
            "daemon_threads": int(st["Threads"]), "daemon_fds": fds,
            "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "pid_max": pid_max,
            "get": pcts(gets), "exec": pcts(execs), "list_ms": list_ms, "listed": len(listed["sandboxes"]),
            "teardown_s": teardown}


def run_bwrap_density(rootfs, k):
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return None
    settle()
    m0 = meminfo()
    procs = []
    try:
        for _ in range(k):
            procs.append(subprocess.Popen([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/",
                                           "--proc", "/proc", "--dev", "/dev", "/bin/sleep", "3600"],
                                          stdin=subprocess.DEVNULL))
        time.sleep(1)
        settle()
        m1 = meminfo()
        per = {"MemAvailable": (m0["MemAvailable"] - m1["MemAvailable"]) / k}
        for f in KERNEL_FIELDS:
            per[f] = (m1.get(f, 0) - m0.get(f, 0)) / k
        return {"n": k, "per_sandbox_kib": per}
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


# --- report ----------------------------------------------------------------------------------

def fmt(v, unit="", digits=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{unit}"
    return f"{v:,}{unit}"


def floor_rows(res):
    """Issue 28's table: (what, Warren, against, ratio, target, met) per row; a part not run, or
    failed, gives None for its figures."""
    cyc = res.get("cycle", [])
    rows = []

    def one(what, warren, against, ratio, target, met):
        rows.append((what, warren, against, ratio, target, met if ratio is not None else None))

    e = res.get("exec")
    if e:
        r = e["warren"]["p50_ms"] / e["spawn"]["p50_ms"]
        one("exec round trip of `true` in a running sandbox, p50", f"{e['warren']['p50_ms']:.2f} ms",
            f"host `posix_spawn` + wait of the same binary {e['spawn']['p50_ms']:.2f} ms", r, "<= 1.3x", r <= 1.3)
        if "api_rtt" in e:
            lb = (e["api_rtt"]["p50_ms"] + e["spawn"]["p50_ms"]) / e["spawn"]["p50_ms"]
            one("(bound) exec over HTTP: the API's own round trip + `posix_spawn`, p50",
                f"{e['api_rtt']['p50_ms'] + e['spawn']['p50_ms']:.2f} ms",
                f"`GET /healthz` {e['api_rtt']['p50_ms']:.2f} ms + spawn", lb, "-", None)
    w, b = cycle_row(cyc, "warren", "create_exec", 1), cycle_row(cyc, "bwrap", "cycle", 1)
    r = w["p50_ms"] / b["p50_ms"] if w and b else None
    one("create -> first exec result, p50, 1 client", f"{w['p50_ms']:.2f} ms" if w else "-",
        f"a whole `bwrap --unshare-all` run {b['p50_ms']:.2f} ms" if b else "-", r, "<= 0.25x",
        r is not None and r <= 0.25)
    w, b = cycle_row(cyc, "warren", "cycle", 2), cycle_row(cyc, "bwrap", "cycle", 2)
    r = w["cycles_per_s"] / b["cycles_per_s"] if w and b else None
    one("create -> exec -> delete cycles/s, 2 clients", f"{w['cycles_per_s']:.1f}/s" if w else "-",
        f"bwrap {b['cycles_per_s']:.1f}/s" if b else "-", r, ">= 2x", r is not None and r >= 2)
    d, bw = res.get("density"), res.get("bwrap_density")
    if d and bw:
        wk, bk = d["per_sandbox_kib"]["MemAvailable"], bw["per_sandbox_kib"]["MemAvailable"]
        r = wk / bk
        one(f"host memory per idle sandbox ({d['live']}, settled)", f"{wk:.0f} KiB",
            f"bwrap + a sleeping busybox in the same rootfs ({bw['n']}), {bk:.0f} KiB", r, "<= 0.75x", r <= 0.75)
    c = res.get("calls") or {}
    py1, py2 = c.get("warren serve: call python, 1 client(s)"), c.get("warren serve: call python, 2 client(s)")
    fpy = c.get("fork+exec python3 -I -S, 2 worker(s)")
    r = py2["per_s"] / fpy["per_s"] if py2 and fpy else None
    one("Python `print(1)` calls/s, 2 clients", f"{py2['per_s']:.1f}/s" if py2 else "-",
        f"fork+exec `python3 -I -S` {fpy['per_s']:.1f}/s" if fpy else "-", r, ">= 4x", r is not None and r >= 4)
    cpp, fcpp = c.get("warren call cpp run (compiled once), 2 client(s)"), c.get("fork+exec cpp program, 2 worker(s)")
    r = cpp["per_s"] / fcpp["per_s"] if cpp and fcpp else None
    one("C++ run compiled once, runs/s, 2 clients", f"{cpp['per_s']:.1f}/s" if cpp else "-",
        f"fork+exec of the program {fcpp['per_s']:.1f}/s" if fcpp else "-", r, ">= 0.8x", r is not None and r >= 0.8)
    r = py2["per_s"] / py1["per_s"] if py1 and py2 else None
    one("Python calls/s, 1 client -> 2 clients", f"{py1['per_s']:.1f} -> {py2['per_s']:.1f}" if py1 and py2 else "-",
        "-", r, ">= 1.6x", r is not None and r >= 1.6)
    # What a second CPU gives work with nothing shared at all on this host, in the same run: two
    # fork+exec loops of the floor's own program where one ran (a PVM guest's two vCPUs may share
    # a core, and its page faults and IPIs go through the hypervisor).
    fpy1 = c.get("fork+exec python3 -I -S, 1 worker(s)")
    if fpy1 and fpy:
        one("(bound) the host's own second CPU: fork+exec `python3 -I -S`, 1 worker -> 2",
            f"{fpy1['per_s']:.1f} -> {fpy['per_s']:.1f}", "-", fpy["per_s"] / fpy1["per_s"], "-", None)
    return rows


def floor_table(res):
    lines = ["| in the same run | Warren | against | ratio | target | met |", "|---|---|---|---|---|---|"]
    for what, warren, against, ratio, target, met in floor_rows(res):
        verdict = "-" if met is None else ("yes" if met else "no")
        lines.append(f"| {what} | {warren} | {against} | {fmt(ratio, 'x', 2)} | {target} | {verdict} |")
    return lines


def report(res, args):
    lines = []
    add = lines.append
    cyc = res.get("cycle", [])
    add(f"Warren speed and density, {time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}: "
        f"{os.cpu_count()} CPUs, {meminfo()['MemTotal'] // 1024 // 1024} GiB, kernel {platform.release()}")
    add("")
    add("Against the floor (issue 28: ratios measured in this run; a host's absolute figures move 3-4x):")
    add("")
    lines += floor_table(res)
    add("")
    add("| cycle (create -> first exec of `true` -> delete) | clients | p50 ms | p99 ms | cycles/s | "
        "warren / this (p50) |")
    add("|---|---|---|---|---|---|")
    for clients in (1, 2):
        w = cycle_row(cyc, "warren", "cycle", clients)
        for system, label in (("warren", "warren (API, full isolation)"), ("crun", "crun run, overlay rootfs"),
                              ("bwrap", "bwrap --unshare-all"), ("fork", "fork+exec /bin/true")):
            r = cycle_row(cyc, system, "cycle", clients)
            if not r:
                add(f"| {label} | {clients} | FAILED | | | |")
                continue
            ratio = (w["p50_ms"] / r["p50_ms"]) if (w and system != "warren") else None
            add(f"| {label} | {clients} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                f"{fmt(r.get('cycles_per_s'))} | {fmt(ratio, 'x', 2)} |")
    add("")
    add("| Warren phase | clients | p50 ms | p99 ms | goal |")
    add("|---|---|---|---|---|")
    goals = {"create_exec": "p50 <= 5 ms, p99 <= 20 ms", "create": "", "exec": "", "delete": "off the create path"}
    for clients in (1, 2):
        for ph, label in (("create_exec", "create -> first exec result"), ("create", "create (201)"),
                          ("exec", "first exec"), ("delete", "delete (204)")):
            r = cycle_row(cyc, "warren", ph, clients)
            if r:
                add(f"| {label} | {clients} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {goals[ph] if clients == 1 else ''} |")
    w2 = cycle_row(cyc, "warren", "cycle", 2)
    add(f"\nSandboxes/s with 2 clients (goal >= 300): {fmt(w2.get('cycles_per_s') if w2 else None)}")
    if "exec" in res:
        e = res["exec"]
        add("")
        add("| exec round trip (`true`) | p50 ms | p99 ms | goal |")
        add("|---|---|---|---|")
        add(f"| warren, POST /v1/sandboxes/{{id}}/exec | {e['warren']['p50_ms']:.2f} | {e['warren']['p99_ms']:.2f} | p50 <= 1 ms |")
        add(f"| host fork+exec of the same busybox `true` (`subprocess`) | {e['fork']['p50_ms']:.2f} | "
            f"{e['fork']['p99_ms']:.2f} | |")
        add(f"| host `posix_spawn` + wait of it | {e['spawn']['p50_ms']:.2f} | {e['spawn']['p99_ms']:.2f} | |")
        if "api_rtt" in e:
            add(f"| the same client's `GET /healthz` (the API's own floor) | {e['api_rtt']['p50_ms']:.2f} | "
                f"{e['api_rtt']['p99_ms']:.2f} | |")
        add(f"| warren / fork+exec | {e['warren']['p50_ms'] / e['fork']['p50_ms']:.2f}x | | |")
    if res.get("calls"):
        add("")
        add("| calls (bench/calls.py) | p50 ms | p99 ms | per s |")
        add("|---|---|---|---|")
        for name, r in res["calls"].items():
            add(f"| {name} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['per_s']:.1f} |")
    if "burst" in res:
        b = res["burst"]
        lt = b["latency"]
        add("")
        add(f"Burst: {b['n']} creates at once on {b['n']} connections: {b['ok']} created, {b['errors']} failed "
            f"in {b['wall_s']:.1f} s ({b['per_s']:.0f}/s); latency p50 {lt['p50_ms']:.0f} ms, p90 {lt['p90_ms']:.0f} ms, "
            f"p99 {lt['p99_ms']:.0f} ms, max {lt['max_ms']:.0f} ms. Teardown of all {b['ok']} (16 concurrent "
            f"DELETEs): {b['teardown_s']:.2f} s (goal < 5 s for 1,000).")
        if b["first_errors"]:
            add(f"First errors: {b['first_errors']}")
    if "density" in res:
        d = res["density"]
        p = d["per_sandbox_kib"]
        add("")
        add(f"Density: {d['live']:,} idle sandboxes (goal 5,000) made in {d['create_s']:.0f} s; "
            f"teardown {d['teardown_s']:.1f} s.")
        add("")
        add("| host memory per idle sandbox, KiB | MemAvailable | Slab | SUnreclaim | PageTables | KernelStack | "
            "Percpu | AnonPages |")
        add("|---|---|---|---|---|---|---|---|")
        add(f"| warren ({d['live']:,} sandboxes) | {p['MemAvailable']:.0f} | {p['Slab']:.0f} | {p['SUnreclaim']:.0f} | "
            f"{p['PageTables']:.0f} | {p['KernelStack']:.0f} | {p['Percpu']:.0f} | {p['AnonPages']:.0f} |")
        bw = res.get("bwrap_density")
        if bw:
            q = bw["per_sandbox_kib"]
            add(f"| bwrap --unshare-all + sleep ({bw['n']}) | {q['MemAvailable']:.0f} | {q['Slab']:.0f} | "
                f"{q['SUnreclaim']:.0f} | {q['PageTables']:.0f} | {q['KernelStack']:.0f} | {q['Percpu']:.0f} | "
                f"{q['AnonPages']:.0f} |")
        add("")
        if d["marginal"]:
            first, last = d["marginal"][0], d["marginal"][-1]
            add(f"Marginal cost: {first['kib_per_sandbox']:.0f} KiB per sandbox at {first['at']:,}, "
                f"{last['kib_per_sandbox']:.0f} KiB at {last['at']:,} (kmalloc-1k: {first['kmalloc_1k_kib']:.0f} -> "
                f"{last['kmalloc_1k_kib']:.0f} KiB).")
        g, x = d["get"], d["exec"]
        add(f"With all {d['live']:,} alive: GET /v1/sandboxes/{{id}} p50 {g['p50_ms']:.2f} ms, p99 {g['p99_ms']:.2f} ms; "
            f"exec `true` p50 {x['p50_ms']:.2f} ms, p99 {x['p99_ms']:.2f} ms; listing all {d['listed']:,} by label "
            f"{d['list_ms']:.0f} ms. Daemon: RSS {d['daemon_rss_kib'] / 1024:.0f} MiB, {d['daemon_threads']} threads, "
            f"{d['daemon_fds']:,} fds.")
        avail = d["mem_available_kib_before"]
        limits = {
            "memory (MemAvailable / per-sandbox cost)": int(avail / max(1.0, p["MemAvailable"])),
            "daemon fds (RLIMIT_NOFILE / 2 per sandbox)": d["nofile_limit"] // 2,
            "kernel.pid_max (one agent per idle sandbox)": d["pid_max"] - 1000,
            "uid ranges (--uid-slots)": 16384,
        }
        add("Where the limit comes from (the smallest wins; memory per sandbox grows with the count, so the "
            "memory bound is optimistic): " + "; ".join(f"{k}: {v:,}" for k, v in limits.items()) + ".")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=200, help="cycles per (system, clients) (default 200)")
    ap.add_argument("--exec-iterations", type=int, default=300)
    ap.add_argument("--burst", type=int, default=1000, help="creates sent at once (default 1000; 0: skip)")
    ap.add_argument("--density", type=int, default=5000, help="idle sandboxes (default 5000; 0: skip)")
    ap.add_argument("--bwrap-density", type=int, default=500, help="idle bwrap sandboxes for comparison")
    ap.add_argument("--quick", action="store_true", help="50 cycles, burst 200, density 500")
    ap.add_argument("--floor", action="store_true",
                    help="issue 28's rows only: cycle, exec, 500 idle sandboxes, calls (no burst)")
    ap.add_argument("--calls", type=int, default=None,
                    help="calls per bench/calls.py row (default 500 with --floor, else 0: skipped)")
    ap.add_argument("--runner-dir", help="bench/calls.py's --data-dir: its runner image, kept between runs")
    ap.add_argument("--warm-pool", type=int, default=None, help="passed to warren serve --warm-pool")
    ap.add_argument("--json")
    ap.add_argument("--markdown", help="also write the table to this file")
    args = ap.parse_args()
    if args.quick:
        args.iterations, args.exec_iterations, args.burst, args.density, args.bwrap_density = 50, 100, 200, 500, 100
    if args.floor:
        args.burst, args.density, args.bwrap_density = 0, 500, 500
    if args.calls is None:
        args.calls = 500 if args.floor else 0
    if os.geteuid() != 0:
        sys.exit("bench/suite.py: run as root (namespaces, cgroups, crun)")
    # Thousands of connections and sandboxes: our own fd limit first.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    tmp = tempfile.mkdtemp(prefix="warren-bench-suite-", dir="/var/tmp")
    proc = None
    res = {"host": {"kernel": platform.release(), "cpus": os.cpu_count(), "loadavg": os.getloadavg()},
           "args": vars(args)}
    try:
        extra = ["--no-microvm", "--no-network"]
        if args.warm_pool is not None:
            extra += ["--warm-pool", str(args.warm_pool)]
        proc, port, token = start_server(tmp, extra)
        root = build_busybox_image(tmp, port, token, IMAGE)
        res["cycle"] = run_cycle(port, token, args.iterations, os.path.join(tmp, "cycle.json"))
        log("exec round trip ...")
        res["exec"] = run_exec(port, token, os.path.join(root, "bin", "true"), args.exec_iterations)
        if args.burst:
            log(f"burst of {args.burst} ...")
            res["burst"] = run_burst(port, token, args.burst)
        if args.density:
            log(f"density: {args.density} idle sandboxes ...")
            res["density"] = run_density(port, token, proc.pid, args.density)
            if args.bwrap_density:
                log(f"density: {args.bwrap_density} idle bwrap sandboxes ...")
                res["bwrap_density"] = run_bwrap_density(root, args.bwrap_density)
        if args.calls:
            # Its own server: this one goes first, and the host settles.
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=600)
            settle()
            res["calls"] = run_calls(args.calls, args.runner_dir)
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # deletes whatever is left
            proc.wait(timeout=600)
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(res, args)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
