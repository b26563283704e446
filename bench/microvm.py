#!/usr/bin/python3
"""microVM benchmark (issue 8): create to first exec by snapshot restore and by cold boot, the
template itself, exec round trips in a guest, and host memory per idle microVM.

  template  the first microvm create of a server with an empty --vm-cache: it boots the
            template VM, saves it, then restores the sandbox from it.
  restore   create -> first exec result (`true`), through the API, sequential: from the warm
            pool (VMs restored ahead and rehearsed, --vm-warm-pool, default 2) when it has one,
            else restored from the template; next to the same cycle for a container sandbox.
  no pool   the same with `--vm-warm-pool 0`: every create starts QEMU and restores.
  cold      the same with `--no-vm-snapshots` (every VM boots its kernel and initramfs).
  vm        with --vms N: backend vm (a q35 PC booting the image's systemd, the agent its
            service), create -> first exec, cold; the image is Debian bookworm + systemd-sysv
            (mmdebstrap, a minute, on the server with the warm pool).
  exec      POST .../exec of `true` in a running microVM, round trip.
  memory    N idle microVMs: per QEMU process RSS, PSS and private bytes (smaps_rollup; pages
            a VM shares with its template and the other VMs count in RSS, split in PSS), and
            the drop of the host's MemAvailable per VM.

Starts its own `warren serve` (build/warren) with scratch state and VM cache under /var/tmp.
Root, Debian's /usr/bin/python3, standard library only.

  sudo /usr/bin/python3 bench/microvm.py [--restores 10] [--colds 3] [--idle 10] [--vms 0] [--json out.json]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from service import Api, log, start_server, summary, REPO  # noqa: E402

SUBNET = "10.85.0.0/16"


def first_exec(api, spec):
    """Create -> first exec result, in seconds, and the sandbox id."""
    t0 = time.perf_counter()
    sid = api.call("POST", "/v1/sandboxes", spec)["id"]
    r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
    dt = time.perf_counter() - t0
    assert r["exit_code"] == 0, r
    return dt, sid


def cycles(api, spec, n):
    samples = []
    for _ in range(n):
        dt, sid = first_exec(api, spec)
        samples.append(dt)
        api.call("DELETE", f"/v1/sandboxes/{sid}")
    return samples


def cgroup_pids(parent, sid):
    try:
        with open(f"/sys/fs/cgroup/unified/{parent}/{sid}/cgroup.procs") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        with open(f"/sys/fs/cgroup/pids/{parent}/{sid}/cgroup.procs") as f:
            return [int(x) for x in f.read().split()]


def smaps(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def build_image(port, token, tmp):
    root = os.path.join(tmp, "rootfs")
    subprocess.run([os.path.join(REPO, "scripts", "make-busybox-rootfs.sh"), root], check=True,
                   stdout=subprocess.DEVNULL)
    env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{port}", WARREN_TOKEN=token)
    subprocess.run([os.path.join(REPO, "build", "warren"), "image", "build", "b:1", "--from-dir", root],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc):
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--restores", type=int, default=10)
    ap.add_argument("--colds", type=int, default=3)
    ap.add_argument("--idle", type=int, default=10)
    ap.add_argument("--execs", type=int, default=50)
    ap.add_argument("--vms", type=int, default=0, help="backend vm cycles (builds a systemd image first)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/microvm.py: run as root")
    tmp = tempfile.mkdtemp(prefix="warren-bench-microvm-", dir="/var/tmp")
    vmcache = os.path.join(tmp, "vmcache")
    spec = {"image": "b:1", "backend": "microvm", "memory_mb": 256}
    out = {}
    proc = None
    for sub in ("a", "b"):
        os.makedirs(os.path.join(tmp, sub))
    try:
        proc, port, token = start_server(os.path.join(tmp, "a"), ["--vm-cache", vmcache, "--net-subnet", SUBNET])
        build_image(port, token, tmp)
        api = Api(port, token)
        node = api.call("GET", "/v1/nodes")["nodes"][0]
        out["accel"] = node["microvm"]["accel"]
        out["accel_probe"] = node["microvm"]["accel_probe"]
        parent = node["cgroup_parent"]

        log("template (first create, empty VM cache) ...")
        dt, sid = first_exec(api, spec)
        out["template_first_exec_s"] = dt
        api.call("DELETE", f"/v1/sandboxes/{sid}")

        log(f"{args.restores} restores ...")
        time.sleep(3)  # the pool fills after the first create of a size
        w0 = api.call("GET", "/v1/nodes")["nodes"][0]["microvm"]["warm_starts"]
        out["restore"] = summary(cycles(api, spec, args.restores))
        out["restore_warm_hits"] = api.call("GET", "/v1/nodes")["nodes"][0]["microvm"]["warm_starts"] - w0
        log(f"{args.restores} containers, same cycle ...")
        out["container"] = summary(cycles(api, {"image": "b:1", "memory_mb": 256}, args.restores))

        log("exec round trips in a microVM ...")
        _, sid = first_exec(api, spec)
        samples = []
        for _ in range(args.execs):
            t0 = time.perf_counter()
            assert api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})["exit_code"] == 0
            samples.append(time.perf_counter() - t0)
        out["exec"] = summary(samples)
        api.call("DELETE", f"/v1/sandboxes/{sid}")

        if args.vms:
            log("building a Debian image with systemd (mmdebstrap) ...")
            env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{port}", WARREN_TOKEN=token)
            subprocess.run([os.path.join(REPO, "build", "warren"), "image", "build", "sysd:1", "--debian", "bookworm",
                            "--packages", "systemd-sysv"], check=True, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            log(f"{args.vms} vm (systemd) cycles ...")
            out["vm"] = summary(cycles(api, {"image": "sysd:1", "backend": "vm", "memory_mb": 256}, args.vms))

        log(f"{args.idle} idle microVMs ...")
        time.sleep(2)
        before = mem_available()
        ids = [first_exec(api, spec)[1] for _ in range(args.idle)]
        time.sleep(5)  # let every guest settle after its first exec
        after = mem_available()
        rows = []
        for sid in ids:
            for pid in cgroup_pids(parent, sid):
                m = smaps(pid)
                rows.append((m.get("Rss", 0), m.get("Pss", 0), m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)))
        n = max(len(rows), 1)
        out["idle"] = {"vms": args.idle, "rss_mib": sum(r[0] for r in rows) / n / 2**20,
                       "pss_mib": sum(r[1] for r in rows) / n / 2**20,
                       "private_mib": sum(r[2] for r in rows) / n / 2**20,
                       "memavailable_drop_mib_per_vm": (before - after) / args.idle / 2**20}
        for sid in ids:
            api.call("DELETE", f"/v1/sandboxes/{sid}")
        stop(proc)
        proc = None

        log(f"{args.colds} cold boots (--no-vm-snapshots) ...")
        proc, port, token = start_server(os.path.join(tmp, "b"), ["--vm-cache", vmcache, "--net-subnet", SUBNET,
                                                                    "--no-vm-snapshots"])
        build_image(port, token, tmp + "/b")
        api = Api(port, token)
        out["cold"] = summary(cycles(api, spec, args.colds))
        stop(proc)
        proc = None

        log(f"{args.restores} restores without a warm pool (--vm-warm-pool 0) ...")
        os.makedirs(os.path.join(tmp, "c"))
        proc, port, token = start_server(os.path.join(tmp, "c"), ["--vm-cache", vmcache, "--net-subnet", SUBNET,
                                                                    "--vm-warm-pool", "0"])
        build_image(port, token, tmp + "/c")
        api = Api(port, token)
        out["restore_no_pool"] = summary(cycles(api, spec, args.restores))
    finally:
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nmicroVMs under {out['accel']} ({out['accel_probe']})")
    print(f"\n{'create -> first exec':<44} {'p50 ms':>9} {'p95 ms':>9} {'n':>4}")
    for k, name in (("restore", "microvm, warm pool (else restored)"),
                    ("restore_no_pool", "microvm, restored (no warm pool)"), ("cold", "microvm, cold boot"),
                    ("container", "container (same image, same server)")):
        s = out[k]
        print(f"{name:<44} {s['p50_ms']:>9.1f} {s['p95_ms']:>9.1f} {s['n']:>4}")
    if "vm" in out:
        print(f"{'vm (q35, systemd as init), cold boot':<44} {out['vm']['p50_ms']:>9.1f} {out['vm']['p95_ms']:>9.1f} "
              f"{out['vm']['n']:>4}")
    print(f"{'first microvm (boots and saves the template)':<44} {out['template_first_exec_s'] * 1000:>9.1f}")
    print(f"\nwarm pool hits: {out['restore_warm_hits']} of {out['restore']['n']} sequential creates")
    print(f"cold boot / create: {out['cold']['p50_ms'] / out['restore']['p50_ms']:.1f}x with the pool, "
          f"{out['cold']['p50_ms'] / out['restore_no_pool']['p50_ms']:.1f}x restoring")
    print(f"exec round trip (true) in a microVM: p50 {out['exec']['p50_ms']:.1f} ms, p95 {out['exec']['p95_ms']:.1f} ms")
    i = out["idle"]
    print(f"\nidle microVM ({i['vms']} running, 256 MiB guests): RSS {i['rss_mib']:.1f} MiB, PSS {i['pss_mib']:.1f} MiB, "
          f"private {i['private_mib']:.1f} MiB per QEMU; host MemAvailable -{i['memavailable_drop_mib_per_vm']:.1f} MiB per VM")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
