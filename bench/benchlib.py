"""Pieces the benchmarks share: errors, signal handling, logging, percentiles, mount(2)."""

import ctypes
import ctypes.util
import os
import sys


class BenchError(Exception):
    pass


class Stopped(Exception):
    """Raised in the main thread by SIGTERM (SIGINT raises KeyboardInterrupt)."""


def _raise_stopped(signum, frame):
    raise Stopped(f"signal {signum}")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def percentile(sorted_vals, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_vals:
        return float("nan")
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    k = (len(sorted_vals) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                ctypes.c_ulong, ctypes.c_char_p]
        _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc.unshare.argtypes = [ctypes.c_int]
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong,
                                ctypes.c_ulong, ctypes.c_ulong]
    return _libc


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1


def sys_mount(src, target, fstype, flags=0, data=None):
    _check(libc().mount(src.encode() if src else None, target.encode(),
                        fstype.encode() if fstype else None, flags,
                        data.encode() if data else None), f"mount {target}")


def sys_umount(target, flags=0):
    _check(libc().umount2(target.encode(), flags), f"umount {target}")


class WarrenServe:
    """A `warren serve` of the benchmark's own on a free loopback port and a fresh data
    directory under `scratch` (its log beside it), with the admin token: its API over HTTP
    and its CLI. stop() ends it (SIGTERM, then SIGKILL after two minutes) and removes the
    data directory, and the log if the serve exited cleanly."""

    def __init__(self, warren, scratch, name, args=(), warm_pool=0):
        import socket
        import subprocess
        import tempfile
        import time
        import urllib.request
        self.warren = warren
        self.data = tempfile.mkdtemp(prefix=f"warren-bench-{name}-", dir=scratch)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.data + ".log", "ab")
        self.proc = subprocess.Popen(
            [warren, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data,
             "--no-microvm", "--warm-pool", str(warm_pool), *args],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(600):
            if self.proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            self.stop()
            raise BenchError(f"warren serve ({name}) did not start: see {self.data}.log")
        if self.proc.poll() is not None:
            raise BenchError(f"warren serve ({name}) exited {self.proc.returncode}: see {self.data}.log")
        self.token = open(os.path.join(self.data, "admin.token")).read().strip()

    def http(self, method, path, body=None, timeout=600):
        import json
        import urllib.error
        import urllib.request
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": "Bearer " + self.token,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                data = r.read()
                return json.loads(data) if data else None
        except urllib.error.HTTPError as e:
            raise BenchError(f"{method} {path}: {e.code} {e.read()[:300]!r}") from None

    def cli(self, *args, timeout=1800):
        import subprocess
        env = dict(os.environ, WARREN_URL=self.url, WARREN_TOKEN=self.token)
        r = subprocess.run([self.warren, *args], env=env, capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            raise BenchError(f"warren {' '.join(args)}: {r.stderr[-2000:]}")
        return r.stdout

    def delete_all(self):
        try:
            for sb in self.http("GET", "/v1/sandboxes").get("sandboxes", []):
                self.http("DELETE", "/v1/sandboxes/" + sb["id"])
        except (OSError, BenchError):
            pass

    def stop(self):
        import shutil
        import signal
        import subprocess
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data, ignore_errors=True)
        self.log.close()
        if self.proc.returncode == 0:  # kept only to explain a serve that failed
            try:
                os.unlink(self.data + ".log")
            except OSError:
                pass
