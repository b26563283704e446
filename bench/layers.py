#!/usr/bin/python3
"""Layer benchmark: building a layer, the cost of each layer at create, shared page cache.

Starts its own `warren serve` on a free loopback port (data dir under /var/tmp) and measures,
each against what a user would do instead, in the same run:

  build   `warren image build` of a tree of --tree-mb MiB (many small files plus large
          random files), split into pack / upload / server-side phases, against
          `mkfs.erofs OUT DIR`, `tar -cf - | tar -xf -` and `cp -a` of the same tree
  create  create -> first exec result with 0, 1 and 10 tool layers (already mounted), and
          10 not yet mounted, interleaved round-robin; the per-layer increment; and, for
          reference, a plain host overlay mount+umount with 0, 1 and 10 extra lowerdirs
  memory  host memory (/proc/meminfo) for N sandboxes that each read one 64 MiB file of
          the same base image, against N `cat`s of one host file and K `cat`s of K copies

Debian's /usr/bin/python3, standard library only. Run as root. See bench/README.md.
"""

import argparse
import hashlib
import http.client
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("build", "create", "memory")
MiB = 1 << 20
KiB = 1 << 10
TMPFS_MAGIC_NAMES = ("tmpfs", "ramfs")
CG_PREFIX = "wbench-layers"


from benchlib import (CLONE_NEWNS, MNT_DETACH, MS_PRIVATE, MS_REC, PR_SET_PDEATHSIG,  # noqa: F401
                      BenchError, Stopped, _check, _raise_stopped, libc, log, percentile,
                      sys_mount, sys_umount)


# ---------------------------------------------------------------------------
# statistics

def summarize(samples_s):
    ms = sorted(x * 1000.0 for x in samples_s)
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95),
            "mean_ms": sum(ms) / len(ms), "min_ms": ms[0], "max_ms": ms[-1]}


def median(vals):
    return percentile(sorted(vals), 50)


# ---------------------------------------------------------------------------
# host helpers



def _pdeathsig_term():
    """preexec_fn: the child gets SIGTERM if this process dies (even by SIGKILL)."""
    libc().prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def fs_type(path):
    """Filesystem type of the mount that holds `path` (from /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    best, best_type = "", "?"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mnt = left.split()[4].replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, best_type = mnt, right.split()[0]
    return best_type


def mounts_under(path):
    path = os.path.realpath(path)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if path in fields[3] or path in fields[4]:
                out.append(fields[4])
    return out


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            parts = v.split()
            if parts:
                out[k] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def proc_rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    time.sleep(0.5)


def tree_bytes(path):
    total = files = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            files += 1
            total += st.st_size
    return files, total


# memory cgroups: v1 on hybrid hosts (this VM), v2 otherwise

def memcg_root():
    if os.path.isfile("/sys/fs/cgroup/memory/memory.stat") or \
            os.path.isdir("/sys/fs/cgroup/memory") and fs_type("/sys/fs/cgroup/memory") == "cgroup":
        return "/sys/fs/cgroup/memory", 1
    if fs_type("/sys/fs/cgroup") == "cgroup2":
        return "/sys/fs/cgroup", 2
    return None, 0


def memcg_read(name):
    """{'charged': bytes, 'file': bytes, 'shmem': bytes} of cgroup `name` (hierarchical)."""
    root, ver = memcg_root()
    if not root:
        return None
    d = os.path.join(root, name)
    if not os.path.isdir(d):
        return {"charged": 0, "file": 0, "shmem": 0}
    stat = {}
    try:
        with open(os.path.join(d, "memory.stat")) as f:
            for line in f:
                k, _, v = line.partition(" ")
                stat[k] = int(v)
        if ver == 1:
            with open(os.path.join(d, "memory.usage_in_bytes")) as f:
                charged = int(f.read())
            return {"charged": charged, "file": stat.get("total_cache", 0),
                    "shmem": stat.get("total_shmem", 0)}
        with open(os.path.join(d, "memory.current")) as f:
            charged = int(f.read())
        return {"charged": charged, "file": stat.get("file", 0), "shmem": stat.get("shmem", 0)}
    except (OSError, ValueError):
        return None


def memcg_make(name):
    root, ver = memcg_root()
    if not root:
        return None
    d = os.path.join(root, name)
    try:
        os.mkdir(d)
    except FileExistsError:
        pass
    except OSError as e:
        log(f"  (no cgroup accounting for host readers: {e})")
        return None
    return d


def memcg_remove(d):
    if d and os.path.isdir(d):
        for _ in range(50):
            try:
                os.rmdir(d)
                return
            except OSError:
                time.sleep(0.1)
        log(f"cleanup: could not remove cgroup {d}")


def warren_cgroup_name(data_dir):
    """`warren serve` puts its sandboxes under warren-<sha256(realpath(data dir))[:8]>."""
    return "warren-" + hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:8]


def cgroup_dirs(name):
    out = []
    try:
        ctrls = os.listdir("/sys/fs/cgroup")
    except OSError:
        return out
    for c in ctrls:
        d = os.path.join("/sys/fs/cgroup", c, name)
        if os.path.isdir(d):
            out.append(d)
    if os.path.isdir(os.path.join("/sys/fs/cgroup", name)):
        out.append(os.path.join("/sys/fs/cgroup", name))
    return out


# ---------------------------------------------------------------------------
# child processes: each in its own session (Ctrl-C reaches only this script, which then
# stops them in order), killed by process group on interrupt

_children = {}  # pid -> Popen
_children_lock = threading.Lock()
BUILD_DIR_RE = re.compile(r"^(/var/tmp/warren-build-[A-Za-z0-9]{6})(/|$)")


def _build_dirs_of(pid):
    """The CLI's scratch dirs (/var/tmp/warren-build-XXXXXX) that process `pid` has open."""
    dirs = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return dirs
    for fd in fds:
        try:
            m = BUILD_DIR_RE.match(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            dirs.add(m.group(1))
    return dirs


def stop_child(p):
    """Terminate a child's process group. `warren image build` killed by a signal leaves its
    scratch dir behind (it has no signal handling), so remove the dirs it had open."""
    if p.poll() is not None:
        return
    leftovers = _build_dirs_of(p.pid)
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    for d in leftovers:
        log(f"  removing {d} left by the interrupted `warren image build`")
        shutil.rmtree(d, ignore_errors=True)


def run(argv, env=None, check=True, what=None):
    """Run argv to completion; returns (returncode, stdout, stderr, wall seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    with _children_lock:
        _children[p.pid] = p
    try:
        out, err = p.communicate()
    except BaseException:
        stop_child(p)
        raise
    finally:
        with _children_lock:
            _children.pop(p.pid, None)
    wall = time.perf_counter() - t0
    out = out.decode(errors="replace")
    err = err.decode(errors="replace")
    if check and p.returncode != 0:
        raise BenchError(f"{what or ' '.join(argv[:3])}: exit {p.returncode}: "
                         f"{(err or out).strip()[-800:] or '(no output)'}")
    return p.returncode, out, err, wall


def stop_all_children():
    with _children_lock:
        ps = list(_children.values())
    for p in ps:
        stop_child(p)


# ---------------------------------------------------------------------------
# Warren HTTP API

class ApiError(BenchError):
    def __init__(self, method, path, status, body):
        self.status = status
        msg = body.decode(errors="replace").strip()
        try:
            err = json.loads(body)["error"]
            msg = f"{err.get('code')}: {err.get('message')}"
        except Exception:  # noqa: BLE001
            pass
        super().__init__(f"{method} {path}: HTTP {status}: {msg[:500]}")


class _Conn(http.client.HTTPConnection):
    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Api:
    """One keep-alive connection with TCP_NODELAY."""

    def __init__(self, port, token, timeout=120.0):
        self.conn = _Conn("127.0.0.1", port, timeout=timeout)
        self.token = token
        self.used = False

    def request(self, method, path, body=None, expect=(200,)):
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, http.client.CannotSendRequest,
                    ConnectionResetError, BrokenPipeError):
                # The server closed an idle keep-alive connection: reconnect once.
                self.conn.close()
                if attempt == 0 and self.used:
                    self.used = False
                    continue
                raise
            self.used = True
            if resp.status not in expect:
                raise ApiError(method, path, resp.status, raw)
            if not raw:
                return None
            try:
                return json.loads(raw)
            except ValueError:
                return raw
        raise AssertionError("unreachable")

    def close(self):
        self.conn.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A private `warren serve`, stopped by its PID."""

    def __init__(self, binary, data_dir, log_path):
        self.binary = binary
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc = None
        self.port = None
        self.token = None
        self.live = set()  # sandbox ids created and not yet deleted
        self.api = None

    def start(self):
        last = ""
        for _ in range(3):  # free_port() can race with another process taking the port
            self.port = free_port()
            with open(self.log_path, "a") as logf:
                self.proc = subprocess.Popen(
                    [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}",
                     "--data-dir", self.data_dir],
                    stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=_pdeathsig_term)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                    c.request("GET", "/healthz")
                    c.getresponse().read()
                    c.close()
                    break
                except OSError:
                    time.sleep(0.05)
            if self.proc.poll() is None:
                with open(os.path.join(self.data_dir, "admin.token")) as f:
                    self.token = f.read().strip()
                self.api = Api(self.port, self.token)
                return
            last = self.log_tail()
        raise BenchError(f"warren serve did not start: {last}")

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:].strip()
        except OSError:
            return ""

    @property
    def env(self):
        return dict(os.environ, WARREN_URL=f"http://127.0.0.1:{self.port}",
                    WARREN_TOKEN=self.token)

    def create(self, spec):
        sb = self.api.request("POST", "/v1/sandboxes", spec, expect=(201,))
        self.live.add(sb["id"])
        return sb["id"]

    def exec(self, sid, body):
        res = self.api.request("POST", f"/v1/sandboxes/{sid}/exec", body)
        if not isinstance(res, dict) or res.get("exit_code") != 0:
            raise BenchError(f"exec {body} in {sid}: {json.dumps(res)[:500]}")
        return res

    def delete(self, sid):
        self.api.request("DELETE", f"/v1/sandboxes/{sid}", expect=(204, 404))
        self.live.discard(sid)

    def delete_all(self):
        if not self.live or self.proc is None or self.proc.poll() is not None:
            return
        log(f"  deleting {len(self.live)} sandbox(es)")
        api = Api(self.port, self.token, 30.0)  # a fresh connection: the old one may be mid-request
        try:
            for sid in list(self.live):
                try:
                    api.request("DELETE", f"/v1/sandboxes/{sid}", expect=(204, 404))
                    self.live.discard(sid)
                except Exception as e:  # noqa: BLE001
                    log(f"  cleanup: delete {sid}: {e}")
        finally:
            api.close()

    def stop(self):
        if self.api:
            self.api.close()
        if self.proc is None or self.proc.poll() is not None:
            return
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)  # the server deletes its sandboxes on SIGTERM
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            log("  warren serve did not stop in 90 s; SIGKILL")
            self.proc.kill()
            self.proc.wait()
        if time.monotonic() - t0 > 2:
            log(f"  warren serve took {time.monotonic() - t0:.1f} s to stop")


# ---------------------------------------------------------------------------
# building images with the CLI

STAMP_RE = re.compile(r"^\[\s*([0-9.]+)s\] (.*)$")


class TmpWatcher:
    """Polls DATA/tmp to see when the server has the upload, unpacks it and runs mkfs.erofs
    (server-side files upload-*, unpack-*, erofs-*)."""

    def __init__(self, tmp_dir, t0):
        self.tmp_dir = tmp_dir
        self.t0 = t0
        self.first = {}
        self.last = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            try:
                names = os.listdir(self.tmp_dir)
            except OSError:
                names = []
            now = time.perf_counter() - self.t0
            for n in names:
                kind = n.split("-", 1)[0]
                self.first.setdefault(kind, now)
                self.last[kind] = now
            self.stop.wait(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def warren_build(server, binary, ref, src_dir, kind="base", watch=False):
    """`warren image build REF --from-dir SRC --kind KIND`; returns a dict of timings."""
    t0 = time.perf_counter()
    argv = [binary, "image", "build", ref, "--from-dir", src_dir, "--kind", kind]
    if watch:
        with TmpWatcher(os.path.join(server.data_dir, "tmp"), t0) as w:
            _, out, err, wall = run(argv, env=server.env, what=f"warren image build {ref}")
        seen = dict(w.first)
    else:
        _, out, err, wall = run(argv, env=server.env, what=f"warren image build {ref}")
        seen = {}
    stamps = {}
    for line in err.splitlines():
        m = STAMP_RE.match(line.strip())
        if not m:
            continue
        t, msg = float(m.group(1)), m.group(2)
        if msg.startswith("packing"):
            stamps["packing"] = t
        elif msg.startswith("uploading"):
            stamps["uploading"] = t
        elif msg.startswith("done"):
            stamps["done"] = t
    digest = out.split()[-1] if out.split() else ""
    return {"ref": ref, "digest": digest, "wall_s": wall, "stamps": stamps, "seen": seen,
            "stderr": err}


def layer_size(server, ref):
    name, _, tag = ref.partition(":")
    for layer in (server.api.request("GET", "/v1/layers") or {}).get("layers", []):
        if layer.get("name") == name and str(layer.get("tag")) == tag:
            return layer.get("size")
    return None


# ---------------------------------------------------------------------------
# 1. building a layer

def make_tree(root, tree_mb, seed=1):
    """~tree_mb MiB: 20,000 files per 500 MiB of log-uniform 1-64 KiB (about 60% of the
    bytes), the rest in large files of at most 64 MiB; all random (incompressible) data;
    100 files per directory, 2 levels; a few symlinks."""
    rng = random.Random(seed)
    target = tree_mb * MiB
    n_small = max(1, round(20000 * tree_mb / 500))
    lo, hi = math.log(1 * KiB), math.log(64 * KiB)
    sizes = [int(math.exp(rng.uniform(lo, hi))) for _ in range(n_small)]
    while len(sizes) > 1 and sum(sizes) > 0.7 * target:
        sizes.pop()
    os.makedirs(root)
    small = 0
    for i, size in enumerate(sizes):
        d = os.path.join(root, "src", f"d{i // 1000:02d}", f"e{(i // 100) % 10}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
            f.write(os.urandom(size))
        small += size
    remaining = max(0, target - small)
    n_large = math.ceil(remaining / (64 * MiB)) if remaining else 0
    os.makedirs(os.path.join(root, "data"))
    for j in range(n_large):
        size = remaining // n_large + (remaining % n_large if j == 0 else 0)
        with open(os.path.join(root, "data", f"large{j}.bin"), "wb") as f:
            left = size
            while left > 0:
                n = min(left, 4 * MiB)
                f.write(os.urandom(n))
                left -= n
    os.makedirs(os.path.join(root, "links"))
    for k in range(min(100, len(sizes))):
        i = k * max(1, len(sizes) // 100)
        os.symlink(f"../src/d{i // 1000:02d}/e{(i // 100) % 10}/f{i:05d}.bin",
                   os.path.join(root, "links", f"l{k}"))
    return {"small_files": len(sizes), "small_bytes": small, "large_files": n_large,
            "large_bytes": remaining}


def bench_build(args, server, work):
    tree = os.path.join(work, "tree")
    log(f"build: making a {args.tree_mb} MiB tree in {tree}")
    t0 = time.perf_counter()
    info = make_tree(tree, args.tree_mb)
    os.sync()
    files, nbytes = tree_bytes(tree)
    log(f"  {files} files, {nbytes / MiB:.0f} MiB ({info['small_files']} small, "
        f"{info['large_files']} large) in {time.perf_counter() - t0:.1f} s")
    rows = []
    mb = nbytes / MiB

    def row(label, wall, out_bytes=None, indent=False, **extra):
        r = {"label": label, "wall_s": wall, "mib_per_s": mb / wall if wall else None,
             "output_bytes": out_bytes, "phase": indent, **extra}
        rows.append(r)
        return r

    def between():
        os.sync()  # previous method's writeback must not slow the next one

    runs = []
    for rnd in range(args.build_runs):
        res = {}
        between()
        log("  warren image build")
        b = warren_build(server, args.bin, "lbench-tree:1", tree, watch=True)
        b["size"] = layer_size(server, "lbench-tree:1")
        server.api.request("DELETE", "/v1/layers/lbench-tree:1", expect=(204,))
        res["warren"] = b
        between()
        out = os.path.join(work, "direct.erofs")
        log("  mkfs.erofs")
        _, _, _, wall = run(["/usr/bin/mkfs.erofs", out, tree], what="mkfs.erofs")
        res["mkfs"] = {"wall_s": wall, "size": os.path.getsize(out)}
        os.unlink(out)
        between()
        dst = os.path.join(work, "tarcopy")
        os.mkdir(dst)
        log("  tar | tar")
        _, _, _, wall = run(["/usr/bin/bash", "-o", "pipefail", "-c",
                             'tar -C "$1" -cf - . | tar -C "$2" -xf -', "bash", tree, dst],
                            what="tar | tar")
        res["tar"] = {"wall_s": wall}
        shutil.rmtree(dst)
        between()
        dst = os.path.join(work, "cpcopy")
        log("  cp -a")
        _, _, _, wall = run(["/usr/bin/cp", "-a", tree, dst], what="cp -a")
        res["cp"] = {"wall_s": wall}
        shutil.rmtree(dst)
        runs.append(res)
    shutil.rmtree(tree)

    def med(key, f=lambda r: r["wall_s"]):
        vals = [f(r[key]) for r in runs if f(r[key]) is not None]
        return median(vals) if vals else None

    row("warren image build (total)", med("warren"), med("warren", lambda r: r["size"]))
    # Phases: the CLI's own timestamps, and the server's temp files seen in DATA/tmp.
    pack = med("warren", lambda r: r["stamps"].get("uploading"))
    done = med("warren", lambda r: r["stamps"].get("done"))
    phases = {}
    if pack is not None and done is not None:
        phases["cli_pack_s"] = pack
        phases["cli_upload_server_s"] = done - pack
    seen_ok = all(all(k in r["warren"]["seen"] for k in ("upload", "unpack", "erofs"))
                  for r in runs)
    if seen_ok:
        up = med("warren", lambda r: r["seen"]["upload"])
        unp = med("warren", lambda r: r["seen"]["unpack"])
        ero = med("warren", lambda r: r["seen"]["erofs"])
        total = med("warren")
        row("  pack: tar of the tree (CLI)", up, phase=True)
        row("  upload over HTTP", unp - up, phase=True)
        row("  server: unpack the tar", ero - unp, phase=True)
        row("  server: mkfs.erofs + sha256 + store", total - ero, phase=True)
        phases.update({"upload_seen_s": up, "unpack_seen_s": unp, "erofs_seen_s": ero})
    elif phases:
        row("  pack (CLI timestamps)", phases["cli_pack_s"], phase=True)
        row("  upload + server (CLI timestamps)", phases["cli_upload_server_s"], phase=True)
    row("mkfs.erofs OUT DIR (direct)", med("mkfs"), med("mkfs", lambda r: r["size"]))
    row("tar -cf - DIR | tar -xf - (copy)", med("tar"))
    row("cp -a DIR DST (copy)", med("cp"))
    return {"tree": {"files": files, "bytes": nbytes, **info}, "runs": args.build_runs,
            "rows": rows, "warren_phases": phases,
            "raw": [{k: ({kk: vv for kk, vv in v.items() if kk != "stderr"})
                     for k, v in r.items()} for r in runs]}


def print_build(res):
    t = res["tree"]
    print(f"\n1. Build a layer from a {t['bytes'] / MiB:.0f} MiB tree ({t['files']} files: "
          f"{t['small_files']} of 1-64 KiB, {t['large_files']} large of random data), "
          f"warm page cache" + (f", median of {res['runs']} runs" if res["runs"] > 1 else ""))
    head = f"{'method':<42} {'wall s':>8} {'MiB/s':>8} {'output MiB':>11}"
    print(head)
    print("-" * len(head))
    for r in res["rows"]:
        rate = f"{r['mib_per_s']:8.1f}" if r["mib_per_s"] and not r["phase"] else f"{'':>8}"
        outb = f"{r['output_bytes'] / MiB:11.1f}" if r.get("output_bytes") else f"{'':>11}"
        wall = f"{r['wall_s']:8.2f}" if r["wall_s"] is not None else f"{'?':>8}"
        print(f"{r['label']:<42} {wall} {rate} {outb}".rstrip())
    ph = res["warren_phases"]
    if "cli_pack_s" in ph:
        print(f"(from `warren image build`'s stderr timestamps: pack {ph['cli_pack_s']:.1f} s, "
              f"upload + server side {ph['cli_upload_server_s']:.1f} s)")
    by = {r["label"]: r["wall_s"] for r in res["rows"]}
    w, m = by.get("warren image build (total)"), by.get("mkfs.erofs OUT DIR (direct)")
    c = by.get("cp -a DIR DST (copy)")
    if w and m and c:
        print(f"warren image build takes {w / m:.1f}x a direct mkfs.erofs and {w / c:.1f}x a cp -a")


# ---------------------------------------------------------------------------
# 2. create latency with 0, 1 and 10 tool layers

def make_tool_dir(path, name):
    os.makedirs(os.path.join(path, "opt/tools", name, "bin"))
    script = os.path.join(path, "opt/tools", name, "bin", name)
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\necho {name}\n")
    os.chmod(script, 0o755)
    with open(os.path.join(path, "opt/tools", name, "data.bin"), "wb") as f:
        f.write(os.urandom(256 * KiB))  # unique content: a distinct blob per tool


def overlay_worker(params_path):
    """Child process: host overlay mount+umount with base + k lowerdirs, in a private mount
    namespace (everything it mounts goes away with it)."""
    with open(params_path) as f:
        p = json.load(f)
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, _raise_stopped)
    lc = libc()
    lc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != p["parent"]:
        return 1
    try:
        _check(lc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        sys_mount("none", "/", None, MS_REC | MS_PRIVATE)
        scratch = p["scratch"]
        sys_mount("tmpfs", scratch, "tmpfs", 0, "size=64m")
        target = os.path.join(scratch, "m")
        os.mkdir(target)
        variants = p["variants"]
        times = {v["name"]: [] for v in variants}
        for rnd in range(p["warmup"] + p["iterations"]):
            k = rnd % len(variants)
            for v in variants[k:] + variants[:k]:
                upper, workd = os.path.join(scratch, "u"), os.path.join(scratch, "w")
                os.mkdir(upper)
                os.mkdir(workd)
                opts = f"lowerdir={':'.join(v['lower'])},upperdir={upper},workdir={workd}"
                t0 = time.perf_counter()
                sys_mount("overlay", target, "overlay", 0, opts)
                sys_umount(target)
                t1 = time.perf_counter()
                shutil.rmtree(upper)
                shutil.rmtree(workd)
                if rnd >= p["warmup"]:
                    times[v["name"]].append(t1 - t0)
        with open(p["out"], "w") as f:
            json.dump(times, f)
        return 0
    except Stopped:
        return 130
    except BaseException as e:  # noqa: BLE001
        log(f"overlay worker: {type(e).__name__}: {e}")
        return 1


def run_overlay_reference(args, work, base_dir, tool_dirs):
    d = os.path.join(work, "ovl-ref")
    os.makedirs(os.path.join(d, "scratch"))
    variants = [{"name": "0", "lower": [base_dir]},
                {"name": "1", "lower": tool_dirs[:1] + [base_dir]},
                {"name": "10", "lower": tool_dirs[:10] + [base_dir]}]
    p = {"parent": os.getpid(), "scratch": os.path.join(d, "scratch"), "variants": variants,
         "iterations": max(args.iterations, 100), "warmup": 5,
         "out": os.path.join(d, "out.json")}
    ppath = os.path.join(d, "params.json")
    with open(ppath, "w") as f:
        json.dump(p, f)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_overlay-worker",
                             ppath], stdin=subprocess.DEVNULL, start_new_session=True)
    with _children_lock:
        _children[proc.pid] = proc
    try:
        rc = proc.wait()
    except BaseException:
        stop_child(proc)
        raise
    finally:
        with _children_lock:
            _children.pop(proc.pid, None)
    if rc != 0:
        raise BenchError(f"overlay reference worker failed (exit {rc})")
    with open(p["out"]) as f:
        times = json.load(f)
    shutil.rmtree(d, ignore_errors=True)
    return {k: summarize(v) for k, v in times.items()}


def bench_create(args, server, work, rootfs):
    log("create: building the base image and 20 tool layers")
    base = "lbench-base:1"
    warren_build(server, args.bin, base, rootfs)
    tools_root = os.path.join(work, "tools")
    warm, cold, warm_dirs = [], [], []
    for prefix, refs in (("w", warm), ("c", cold)):
        for i in range(10):
            name = f"{prefix}{i}"
            d = os.path.join(tools_root, name)
            make_tool_dir(d, name)
            ref = f"lbench-tool-{name}:1"
            warren_build(server, args.bin, ref, d, kind="tool")
            refs.append(ref)
            if prefix == "w":
                warm_dirs.append(d)
    # The holder keeps the base and the 10 "warm" tool layers mounted all along; the 10 "cold"
    # ones are used by no other sandbox, so each create mounts them and each delete unmounts.
    holder = server.create({"image": base, "tools": warm})
    r = server.exec(holder, {"cmd": "ls /opt/tools | wc -l"})
    if r.get("stdout", "").strip() != "10":
        raise BenchError(f"the 10-tool sandbox sees {r.get('stdout')!r} tools, not 10")
    variants = [("0", "base only (0 tool layers)", []),
                ("1", "base + 1 tool layer", warm[:1]),
                ("10", "base + 10 tool layers", warm),
                ("10cold", "base + 10 tool layers, not yet mounted", cold)]
    times = {v[0]: [] for v in variants}
    phases = {v[0]: {"create": [], "exec": []} for v in variants}
    paired = {"10": [], "10cold": []}

    def cycle(tools):
        spec = {"image": base}
        if tools:
            spec["tools"] = tools
        t0 = time.perf_counter()
        sid = server.create(spec)
        t1 = time.perf_counter()
        server.exec(sid, {"argv": ["true"]})
        t2 = time.perf_counter()
        server.delete(sid)
        return t2 - t0, t1 - t0, t2 - t1

    n = args.iterations
    log(f"  {args.warmup} warm-up + {n} measured rounds of {len(variants)} variants, interleaved")
    for rnd in range(args.warmup + n):
        k = rnd % len(variants)
        this = {}
        for key, _, tools in variants[k:] + variants[:k]:
            this[key] = cycle(tools)
        if rnd < args.warmup:
            continue
        for key, (tot, cr, ex) in this.items():
            times[key].append(tot)
            phases[key]["create"].append(cr)
            phases[key]["exec"].append(ex)
        for key in paired:
            paired[key].append((this[key][0] - this["0"][0]) / 10)
    server.delete(holder)
    rows = [{"variant": key, "label": label, **summarize(times[key]),
             "create_p50_ms": summarize(phases[key]["create"])["p50_ms"],
             "exec_p50_ms": summarize(phases[key]["exec"])["p50_ms"]}
            for key, label, _ in variants]
    by = {r["variant"]: r for r in rows}
    res = {"rows": rows, "iterations": n, "warmup": args.warmup,
           "per_layer_ms": (by["10"]["p50_ms"] - by["0"]["p50_ms"]) / 10,
           "per_layer_paired_ms": median(paired["10"]) * 1000,
           "per_cold_layer_ms": (by["10cold"]["p50_ms"] - by["0"]["p50_ms"]) / 10,
           "per_cold_layer_paired_ms": median(paired["10cold"]) * 1000}
    if not args.no_overlay_ref:
        log("  reference: host overlay mount+umount with 0, 1, 10 extra lowerdirs")
        try:
            ref = run_overlay_reference(args, work, rootfs, warm_dirs)
            res["overlay_ref"] = ref
            res["overlay_per_lowerdir_ms"] = (ref["10"]["p50_ms"] - ref["0"]["p50_ms"]) / 10
        except BenchError as e:
            log(f"  overlay reference: {e}")
            res["overlay_ref_error"] = str(e)
    shutil.rmtree(tools_root, ignore_errors=True)
    return res


def print_create(res):
    print(f"\n2. Create -> first exec result of `true` with tool layers "
          f"({res['iterations']} rounds, variants interleaved round-robin)")
    head = f"{'sandbox':<44} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'create p50':>11} {'exec p50':>9}"
    print(head)
    print("-" * len(head))
    for r in res["rows"]:
        print(f"{r['label']:<44} {r['n']:>4} {r['p50_ms']:8.2f} {r['p95_ms']:8.2f} "
              f"{r['create_p50_ms']:11.2f} {r['exec_p50_ms']:9.2f}")
    ref = res.get("overlay_ref")
    if ref:
        for k, label in (("0", "host overlay mount+umount, base only"),
                         ("1", "host overlay mount+umount, + 1 lowerdir"),
                         ("10", "host overlay mount+umount, + 10 lowerdirs")):
            s = ref[k]
            print(f"{label:<44} {s['n']:>4} {s['p50_ms']:8.3f} {s['p95_ms']:8.3f}")
    print(f"per tool layer (already mounted): (p50 with 10 - p50 with 0) / 10 = "
          f"{res['per_layer_ms']:+.3f} ms; median of per-round differences "
          f"{res['per_layer_paired_ms']:+.3f} ms  (target: well under 1 ms)")
    print(f"per tool layer not yet mounted (mount + unmount included): "
          f"{res['per_cold_layer_ms']:+.3f} ms; paired {res['per_cold_layer_paired_ms']:+.3f} ms")
    if "overlay_per_lowerdir_ms" in res:
        print(f"host overlay, per extra lowerdir: {res['overlay_per_lowerdir_ms']:+.3f} ms")


# ---------------------------------------------------------------------------
# 3. host memory for N sandboxes reading the same file

def host_readers(files, cg):
    """One `cat FILE > /dev/null` per file, one after the other, each in cgroup `cg`."""
    for path in files:
        if cg:
            argv = ["/bin/sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec cat "$2" > /dev/null',
                    "sh", cg, path]
        else:
            argv = ["/bin/sh", "-c", 'exec cat "$1" > /dev/null', "sh", path]
        run(argv, what=f"cat {path}")


def mem_delta(before, after, n, cg_before=None, cg_after=None):
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("MemAvailable", "Cached", "Shmem")}
    out = {"readers": n, "memavailable_drop": -d["MemAvailable"], "cached_growth": d["Cached"],
           "shmem_growth": d["Shmem"]}
    out["per_reader"] = out["memavailable_drop"] / n if n else None
    if cg_before is not None and cg_after is not None:
        out["cg_charged"] = cg_after["charged"] - cg_before["charged"]
        out["cg_file"] = cg_after["file"] - cg_before["file"]
    return out


def bench_memory(args, server, work, rootfs):
    n, big = args.sandboxes, args.big_mb * MiB
    k = min(args.copies, n)
    mem = os.path.join(work, "mem")
    os.makedirs(mem)
    log(f"memory: base image with busybox + one {args.big_mb} MiB random file")
    data = os.urandom(big)
    bigroot = os.path.join(mem, "bigroot")
    shutil.copytree(rootfs, bigroot, symlinks=True)
    for path in (os.path.join(bigroot, "big"), os.path.join(mem, "host-big")):
        with open(path, "wb") as f:
            f.write(data)
    del data
    ref = "lbench-big:1"
    warren_build(server, args.bin, ref, bigroot)
    shutil.rmtree(bigroot)
    spec = {"image": ref, "memory_mb": args.memory_mb}
    sid = server.create(spec)  # warm-up
    server.exec(sid, {"argv": ["true"]})
    server.delete(sid)
    wcg = warren_cgroup_name(server.data_dir)
    res = {"sandboxes": n, "copies": k, "big_bytes": big, "memory_mb": args.memory_mb}

    # Warren: N sandboxes on the same base, each reads /big once and stays running.
    log(f"  warren: {n} sandboxes (memory_mb {args.memory_mb}), each `cat /big > /dev/null`")
    drop_caches()
    m0, c0, r0 = meminfo(), memcg_read(wcg), proc_rss(server.proc.pid)
    ids = []
    t0 = time.perf_counter()
    for _ in range(n):
        ids.append(server.create(spec))
    t_create = time.perf_counter() - t0
    time.sleep(0.5)
    m1, c1, r1 = meminfo(), memcg_read(wcg), proc_rss(server.proc.pid)
    t0 = time.perf_counter()
    for sid in ids:
        server.exec(sid, {"cmd": "cat /big > /dev/null"})
    t_read = time.perf_counter() - t0
    time.sleep(0.5)
    m2, c2, r2 = meminfo(), memcg_read(wcg), proc_rss(server.proc.pid)
    res["warren_idle"] = mem_delta(m0, m1, n, c0, c1)
    res["warren_read"] = mem_delta(m0, m2, n, c0, c2)
    res["warren_read_only"] = mem_delta(m1, m2, n, c1, c2)
    res["warren_server_rss_growth"] = r2 - r0
    res["warren_create_s"] = t_create
    res["warren_read_s"] = t_read
    log(f"  created {n} in {t_create:.1f} s, read in {t_read:.1f} s; deleting them")
    for sid in ids:
        server.delete(sid)

    # N plain readers of one host file.
    log(f"  host: {n} x cat of one file")
    cg = memcg_make(f"{CG_PREFIX}-{os.getpid()}-host")
    try:
        drop_caches()
        m0, c0 = meminfo(), memcg_read(os.path.basename(cg)) if cg else None
        host_readers([os.path.join(mem, "host-big")] * n, cg)
        time.sleep(0.5)
        m1, c1 = meminfo(), memcg_read(os.path.basename(cg)) if cg else None
        res["host_cat"] = mem_delta(m0, m1, n, c0, c1)
    finally:
        memcg_remove(cg)

    # K directory copies, one reader each.
    log(f"  copies: {k} x cp of the file into separate dirs, then one cat of each copy")
    copies = []
    t0 = time.perf_counter()
    for i in range(k):
        d = os.path.join(mem, "copies", f"c{i}")
        os.makedirs(d)
        run(["/usr/bin/cp", os.path.join(mem, "host-big"), os.path.join(d, "big")], what="cp")
        copies.append(os.path.join(d, "big"))
    res["copies_cp_s"] = time.perf_counter() - t0
    cg = memcg_make(f"{CG_PREFIX}-{os.getpid()}-copies")
    try:
        drop_caches()
        m0, c0 = meminfo(), memcg_read(os.path.basename(cg)) if cg else None
        host_readers(copies, cg)
        time.sleep(0.5)
        m1, c1 = meminfo(), memcg_read(os.path.basename(cg)) if cg else None
        res["copies_cat"] = mem_delta(m0, m1, k, c0, c1)
    finally:
        memcg_remove(cg)
    scale = n / k
    res["copies_extrapolated"] = {
        key: (v * scale if isinstance(v, (int, float)) and key not in ("per_reader",) else v)
        for key, v in res["copies_cat"].items()}
    # Only the page cache scales with the number of copies; MemAvailable's drop does not.
    res["copies_extrapolated"].update(readers=n, memavailable_drop=None, per_reader=None)
    shutil.rmtree(mem)
    return res


def print_memory(res):
    n, k, big = res["sandboxes"], res["copies"], res["big_bytes"]
    print(f"\n3. Host memory: {n} readers of one {big / MiB:.0f} MiB file (MiB; caches dropped "
          f"before each baseline; 'x1 read' = page cache growth / {big / MiB:.0f} MiB)")
    head = (f"{'readers':<40} | {'MemAvail-':>9} {'/reader':>7} {'Cached+':>8} {'Shmem+':>7} "
            f"{'x1 read':>7} | {'cg mem+':>8} {'cg cache+':>9} {'x1 read':>7}")
    print(f"{'':<40} | {'/proc/meminfo (whole host)':^42} | {'memory cgroup':^27}".rstrip())
    print(head)
    print("-" * len(head))

    def line(label, d):
        if d.get("cg_charged") is not None:
            cg = (f"{d['cg_charged'] / MiB:8.1f} {d['cg_file'] / MiB:9.1f} "
                  f"{d['cg_file'] / big:7.2f}")
        else:
            cg = f"{'-':>8} {'-':>9} {'-':>7}"
        if d["memavailable_drop"] is not None:
            avail = f"{d['memavailable_drop'] / MiB:9.1f} {d['per_reader'] / MiB:7.2f}"
        else:
            avail = f"{'-':>9} {'-':>7}"
        print(f"{label:<40} | {avail} {d['cached_growth'] / MiB:8.1f} "
              f"{d['shmem_growth'] / MiB:7.1f} {d['cached_growth'] / big:7.2f} | {cg}")

    line(f"warren: {n} sandboxes, idle", res["warren_idle"])
    line(f"warren: {n} sandboxes after cat /big", res["warren_read"])
    line(f"  of which the {n} reads", res["warren_read_only"])
    line(f"host: {n} x cat of one file", res["host_cat"])
    line(f"copies: {k} x cat of its own copy", res["copies_cat"])
    if k != n:
        line(f"copies: extrapolated to {n} (x{n / k:g})", res["copies_extrapolated"])
    print(f"(MemAvail- = drop of MemAvailable, which counts clean page cache as available, so it "
          f"is what the readers cost beyond the cache; cg = memory charged to warren's cgroup "
          f"parent, or to this script's cgroup for the host readers; warren serve's RSS grew "
          f"{res['warren_server_rss_growth'] / MiB:.1f} MiB; {n} creates took "
          f"{res['warren_create_s']:.1f} s, {n} reads {res['warren_read_s']:.1f} s; "
          f"{k} copies took {res['copies_cp_s']:.1f} s and {k * big / MiB:.0f} MiB of disk)")
    w = res["warren_read"]
    c = res["copies_extrapolated"]
    print(f"page cache for {n} sandboxes reading the same {big / MiB:.0f} MiB: "
          f"{w['cached_growth'] / MiB:.0f} MiB ({w['cached_growth'] / big:.2f}x one read"
          + (f"; cgroup: {w['cg_file'] / big:.2f}x" if w.get("cg_file") is not None else "")
          + f"); {n} directory copies: ~{c['cached_growth'] / MiB:.0f} MiB"
          + (f" (measured with {k}, extrapolated)" if k != n else "")
          + f"; each sandbox beyond the cache: {w['per_reader'] / MiB:.2f} MiB of MemAvailable"
          + (f", {(w['cg_charged'] - w['cg_file']) / n / MiB:.2f} MiB charged to its cgroup"
             if w.get("cg_charged") is not None else ""))


# ---------------------------------------------------------------------------
# main

def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Layer benchmark: build time, per-layer create cost, shared page cache.")
    ap.add_argument("--bin", default=os.environ.get("WARREN_BIN",
                                                    os.path.join(REPO, "build", "warren")),
                    help="the warren binary (default: $WARREN_BIN or build/warren)")
    ap.add_argument("--tree-mb", type=int, default=500, help="size of the tree to build, MiB (500)")
    ap.add_argument("--build-runs", type=int, default=1,
                    help="rounds of the four build methods; the median is reported (1)")
    ap.add_argument("--iterations", "-n", type=int, default=40,
                    help="measured create rounds per variant (40)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured create rounds (3)")
    ap.add_argument("--sandboxes", type=int, default=100, help="sandboxes for the memory part (100)")
    ap.add_argument("--copies", type=int, default=10,
                    help="directory copies actually made for the memory comparison (10)")
    ap.add_argument("--big-mb", type=int, default=64, help="size of the shared file, MiB (64)")
    ap.add_argument("--memory-mb", type=int, default=128, help="memory_mb of each sandbox (128)")
    ap.add_argument("--only", default=",".join(PARTS),
                    help=f"comma-separated subset of {','.join(PARTS)} (default: all)")
    ap.add_argument("--no-overlay-ref", action="store_true",
                    help="skip the host overlay mount reference in the create part")
    ap.add_argument("--workdir", default="/var/tmp",
                    help="where the scratch dir and the server's data dir go; a disk fs (/var/tmp)")
    ap.add_argument("--quick", action="store_true",
                    help="small run: --tree-mb 100 --iterations 10 --sandboxes 20 --copies 5")
    ap.add_argument("--json", metavar="FILE", help="also write the results to FILE")
    args = ap.parse_args(argv)
    if args.quick:
        given = set(a.split("=")[0] for a in argv)
        for opt, attr, val in (("--tree-mb", "tree_mb", 100), ("--iterations", "iterations", 10),
                               ("--sandboxes", "sandboxes", 20), ("--copies", "copies", 5)):
            if opt not in given and not (opt == "--iterations" and "-n" in given):
                setattr(args, attr, val)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in args.only:
        if s not in PARTS:
            ap.error(f"--only: unknown part {s!r} (choose from {', '.join(PARTS)})")
    if min(args.tree_mb, args.iterations, args.sandboxes, args.copies, args.big_mb,
           args.build_runs) < 1 or args.warmup < 0:
        ap.error("sizes and counts must be >= 1 (--warmup >= 0)")
    return args


def check_clean(server, work, cg_name):
    """What this run may have left behind; returns a list of problems."""
    problems = []
    if server.proc is not None and server.proc.poll() is None:
        problems.append(f"warren serve (pid {server.proc.pid}) still running")
    for d in cgroup_dirs(cg_name):
        problems.append(f"cgroup left: {d}")
    for d in cgroup_dirs(f"{CG_PREFIX}-{os.getpid()}-host") + \
            cgroup_dirs(f"{CG_PREFIX}-{os.getpid()}-copies"):
        problems.append(f"cgroup left: {d}")
    for m in mounts_under(work):
        problems.append(f"mount left: {m}")
    if os.path.exists(work):
        problems.append(f"scratch dir left: {work}")
    return problems


def cleanup(server, work, cg_name):
    stop_all_children()
    try:
        server.delete_all()
    except Exception as e:  # noqa: BLE001
        log(f"cleanup: {e}")
    server.stop()
    if cgroup_dirs(cg_name) and any(
            os.listdir(d) and any(os.path.isdir(os.path.join(d, x)) for x in os.listdir(d))
            for d in cgroup_dirs(cg_name)):
        # Sandboxes outlived the server (it was killed): a new serve on the same data dir
        # reaps them at start, and deletes everything on SIGTERM.
        log("  sandbox cgroups outlived the server; restarting it once to reap them")
        try:
            server.proc = None
            server.live.clear()
            server.start()
        except BenchError as e:
            log(f"cleanup: {e}")
        server.stop()
    for m in mounts_under(work):
        try:
            sys_umount(m, MNT_DETACH)
        except OSError:
            pass
    for _ in range(3):
        shutil.rmtree(work, ignore_errors=True)
        if not os.path.exists(work):
            break
        time.sleep(1)
    return check_clean(server, work, cg_name)


def main(argv):
    if argv[:1] == ["--_overlay-worker"]:
        return overlay_worker(argv[1])
    args = parse_args(argv)
    if os.geteuid() != 0:
        log("layers.py must run as root (warren serve, drop_caches, cgroups, mounts)")
        return 1
    if not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        log(f"no warren binary at {args.bin} (build it, or set --bin / $WARREN_BIN)")
        return 1
    for tool in ("/usr/bin/mkfs.erofs", "/bin/busybox", "/usr/bin/tar", "/usr/bin/bash"):
        if not os.path.exists(tool):
            log(f"{tool} is missing (scripts/install-deps.sh)")
            return 1
    if fs_type(args.workdir) in TMPFS_MAGIC_NAMES:
        log(f"--workdir {args.workdir} is {fs_type(args.workdir)}; use a disk filesystem")
        return 1
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    load = os.getloadavg()
    if load[0] > 0.5 * (os.cpu_count() or 1):
        log(f"warning: load average {load[0]:.2f} on {os.cpu_count()} CPUs: "
            "numbers will be noisy")
    t_start = time.perf_counter()
    work = tempfile.mkdtemp(prefix="warren-layers-", dir=args.workdir)
    data = os.path.join(work, "data")
    server = Server(args.bin, data, os.path.join(work, "serve.log"))
    cg_name = warren_cgroup_name(data)
    results = {}
    rc = 0
    problems = []
    try:
        os.mkdir(data, 0o700)
        cg_name = warren_cgroup_name(data)
        log(f"starting warren serve (data dir {data})")
        server.start()
        rootfs = os.path.join(work, "busybox")
        run([os.path.join(REPO, "scripts", "make-busybox-rootfs.sh"), rootfs],
            what="make-busybox-rootfs.sh")
        for part in PARTS:
            if part not in args.only:
                continue
            if part == "build":
                results[part] = bench_build(args, server, work)
                print_build(results[part])
            elif part == "create":
                results[part] = bench_create(args, server, work, rootfs)
                print_create(results[part])
            else:
                results[part] = bench_memory(args, server, work, rootfs)
                print_memory(results[part])
            sys.stdout.flush()
    except (KeyboardInterrupt, Stopped):
        log("interrupted; cleaning up")
        rc = 130
    except Exception as e:  # noqa: BLE001
        msg = str(e) if isinstance(e, BenchError) else f"{type(e).__name__}: {e}"
        log(f"FAILED: {msg}")
        if server.proc is not None and server.proc.poll() is not None:
            log(f"warren serve exited ({server.proc.returncode}); its log:\n{server.log_tail()}")
        rc = 1
    finally:
        # No second Ctrl-C in the middle of the cleanup; every step has a timeout.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        problems = cleanup(server, work, cg_name)
        if problems:
            log("cleanup check FAILED:\n  " + "\n  ".join(problems))
            rc = rc or 1
        else:
            log(f"cleanup check: ok (server pid {server.proc.pid if server.proc else '-'} "
                f"stopped, no sandbox cgroups, no mounts, {work} removed); "
                f"total {time.perf_counter() - t_start:.0f} s")
    if args.json:
        doc = {
            "benchmark": "layers: build, per-layer create cost, shared page cache",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                     "mem_total": meminfo().get("MemTotal"), "loadavg_at_start": load,
                     "loadavg_at_end": os.getloadavg(), "python": platform.python_version()},
            "params": {"tree_mb": args.tree_mb, "build_runs": args.build_runs,
                       "iterations": args.iterations, "warmup": args.warmup,
                       "sandboxes": args.sandboxes, "copies": args.copies,
                       "big_mb": args.big_mb, "memory_mb": args.memory_mb,
                       "only": args.only, "quick": args.quick},
            "results": results,
            "exit_code": rc,
            "cleanup_problems": problems,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
