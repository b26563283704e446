#!/usr/bin/env python3
"""What seccomp + Landlock cost: the same sandboxes with and without them, in one run.

Starts two private `warren serve` instances on loopback (one normal, one with the
benchmark-only --unsafe-no-seccomp-landlock), builds the same busybox image in each, then
measures create -> first exec result, and a syscall-heavy workload inside a sandbox
(fork+exec loops, stat, readdir, find, tar). Prints p50/p95 and the relative cost.

  sudo /usr/bin/python3 bench/hardening.py [--iterations 100] [--workload-runs 15]
Goal (issue: container isolation): under 2 ms on create, under 5% on the workload.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import http.client

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = r"""
i=0
while [ $i -lt 200 ]; do stat /bin/sh >/dev/null; ls /bin >/dev/null; i=$((i+1)); done
find / -xdev >/dev/null 2>&1
j=0
while [ $j -lt 20 ]; do tar cf - /bin 2>/dev/null | wc -c >/dev/null; j=$((j+1)); done
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, unsafe):
        self.dir = tempfile.mkdtemp(prefix="warren-hardening-", dir="/var/tmp")
        self.port = free_port()
        args = [binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.dir]
        if unsafe:
            args.append("--unsafe-no-seccomp-landlock")
        self.log = open(os.path.join(self.dir, "serve.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                self.conn.request("GET", "/healthz")
                self.conn.getresponse().read()
                break
            except OSError:
                time.sleep(0.05)
        self.token = open(os.path.join(self.dir, "admin.token")).read().strip()
        self.env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{self.port}", WARREN_TOKEN=self.token)

    def call(self, method, path, body=None):
        h = {"Authorization": "Bearer " + self.token, "Content-Type": "application/json"}
        self.conn.request(method, path, None if body is None else json.dumps(body), h)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:200]!r}")
        return json.loads(data) if data else None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("WARREN_BIN", os.path.join(REPO, "build", "warren")))
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--workload-runs", type=int, default=15)
    args = ap.parse_args()
    rootfs = tempfile.mkdtemp(prefix="warren-hardening-rootfs-", dir="/var/tmp")
    servers = {}
    try:
        subprocess.run([os.path.join(REPO, "scripts", "make-busybox-rootfs.sh"), rootfs], check=True)
        for name, unsafe in (("full", False), ("without seccomp+landlock", True)):
            s = Server(args.bin, unsafe)
            servers[name] = s
            subprocess.run([args.bin, "image", "build", "hb:1", "--from-dir", rootfs], env=s.env,
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The two configurations alternate, iteration by iteration, so drift in what else
        # the machine is doing hits both alike.
        results = {name: ([], []) for name in servers}
        for i in range(args.iterations + 5):
            for name, s in servers.items():
                t0 = time.monotonic()
                sb = s.call("POST", "/v1/sandboxes", {"image": "hb:1"})
                s.call("POST", f"/v1/sandboxes/{sb['id']}/exec", {"argv": ["true"]})
                if i >= 5:
                    results[name][0].append((time.monotonic() - t0) * 1000)
                s.call("DELETE", f"/v1/sandboxes/{sb['id']}")
        boxes = {name: s.call("POST", "/v1/sandboxes", {"image": "hb:1", "cpu": 2})
                 for name, s in servers.items()}
        for i in range(args.workload_runs + 2):
            for name, s in servers.items():
                t0 = time.monotonic()
                r = s.call("POST", f"/v1/sandboxes/{boxes[name]['id']}/exec",
                           {"cmd": WORKLOAD, "timeout_s": 300})
                if r["exit_code"] != 0:
                    raise RuntimeError(f"workload failed: {r}")
                if i >= 2:
                    results[name][1].append((time.monotonic() - t0) * 1000)
        for name, s in servers.items():
            s.call("DELETE", f"/v1/sandboxes/{boxes[name]['id']}")
        print(f"{'configuration':<28} {'create->exec p50':>17} {'p95':>8} {'workload p50':>13} {'p95':>9}")
        for name, (c, w) in results.items():
            print(f"{name:<28} {statistics.median(c):>14.2f} ms {pct(c, .95):>6.2f} ms "
                  f"{statistics.median(w):>10.1f} ms {pct(w, .95):>7.1f} ms")
        (cf, wf), (cn, wn) = results["full"], results["without seccomp+landlock"]
        dc = statistics.median(cf) - statistics.median(cn)
        dw = (statistics.median(wf) / statistics.median(wn) - 1) * 100
        print(f"\nseccomp+Landlock cost: {dc:+.2f} ms on create->first exec (goal < 2 ms), "
              f"{dw:+.1f}% on the workload (goal < 5%)")
    finally:
        for s in servers.values():
            s.stop()
        shutil.rmtree(rootfs, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
