#!/usr/bin/python3
"""Sandbox cycle benchmark: create -> first exec of `true` -> delete.

Measures, for 1 and for N concurrent clients:
  warren  Warren's HTTP API: POST /v1/sandboxes, POST .../exec {"argv": ["true"]}, DELETE
  crun    `crun run` of an OCI bundle whose rootfs is an overlay (busybox lower, fresh
          upper/work per cycle), 5 namespaces (pid, ipc, uts, mount, net), memory limit
  bwrap   `bwrap --unshare-all --ro-bind ROOTFS / --proc /proc --dev /dev /bin/true`
  fork    plain fork+exec of /bin/true (the floor)

Debian's /usr/bin/python3, standard library only. Run as root (crun, overlay mounts).
See bench/README.md.
"""

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

SYSTEMS = ("warren", "crun", "bwrap", "fork")
CRUN_ID_PREFIX = "wbench"


from benchlib import (CLONE_NEWNS, MNT_DETACH, MS_PRIVATE, MS_REC, PR_SET_PDEATHSIG,  # noqa: F401
                      BenchError, Stopped, _check, _raise_stopped, libc, log, percentile,
                      sys_mount, sys_umount)


# ---------------------------------------------------------------------------
# statistics

def summarize(samples_s):
    ms = sorted(x * 1000.0 for x in samples_s)
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "mean_ms": sum(ms) / len(ms),
        "min_ms": ms[0],
        "max_ms": ms[-1],
    }


# ---------------------------------------------------------------------------
# generic driver: N client threads pulling cycles from a shared counter

def run_clients(make_client, n_clients, iterations, warmup):
    """Run `iterations` measured cycles spread over `n_clients` threads.

    make_client(idx) -> object with .cycle() -> {phase: seconds} (must contain "cycle")
    and .close(). Each client first runs `warmup` unmeasured cycles. Returns
    {"phases": {phase: [seconds...]}, "wall_s": float, "n": int}.
    """
    clients = []
    stop = threading.Event()
    try:
        for i in range(n_clients):
            clients.append(make_client(i))
        lock = threading.Lock()
        counter = [0]
        phases = {}
        errors = []
        ready = threading.Semaphore(0)
        finished = threading.Semaphore(0)
        go = threading.Event()
        ends = [0.0] * n_clients

        def worker(idx):
            c = clients[idx]
            try:
                for _ in range(warmup):
                    if stop.is_set():
                        break
                    c.cycle()
            except BaseException as e:  # noqa: BLE001 - reported to the main thread
                errors.append(e)
                stop.set()
            ready.release()
            go.wait()
            try:
                while not stop.is_set():
                    with lock:
                        if counter[0] >= iterations:
                            break
                        counter[0] += 1
                    r = c.cycle()
                    with lock:
                        for k, v in r.items():
                            phases.setdefault(k, []).append(v)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                stop.set()
            finally:
                ends[idx] = time.perf_counter()
                finished.release()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True)
                   for i in range(n_clients)]
        for t in threads:
            t.start()
        t0 = time.perf_counter()
        n_done = 0
        try:
            n_ready = 0
            while n_ready < n_clients:
                if ready.acquire(timeout=0.2):
                    n_ready += 1
            t0 = time.perf_counter()
            go.set()
            # Wait on a semaphore, not Thread.join(): a KeyboardInterrupt inside join()
            # can make CPython 3.11 mark a running thread as stopped.
            n_done = 0
            while n_done < n_clients:
                if finished.acquire(timeout=0.2):
                    n_done += 1
        except BaseException:
            # Let every client finish its current cycle (so nothing is left behind).
            stop.set()
            go.set()
            deadline = time.monotonic() + 30
            while n_done < n_clients and time.monotonic() < deadline:
                if finished.acquire(timeout=0.2):
                    n_done += 1
            raise
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        if stop.is_set():
            raise Stopped("stopped")
        wall = max(ends) - t0
        return {"phases": phases, "wall_s": wall, "n": len(phases.get("cycle", []))}
    finally:
        for c in clients:
            try:
                c.close()
            except Exception as e:  # noqa: BLE001
                log(f"cleanup: {e}")


# ---------------------------------------------------------------------------
# busybox rootfs

def build_rootfs(path, busybox="/bin/busybox"):
    if not os.path.exists(busybox):
        raise BenchError(f"{busybox} not found (apt-get install busybox-static)")
    os.makedirs(path)
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "tmp", "var/tmp",
              "proc", "sys", "dev", "run", "home"):
        os.makedirs(os.path.join(path, d), exist_ok=True)
    os.chmod(os.path.join(path, "tmp"), 0o1777)
    os.chmod(os.path.join(path, "var/tmp"), 0o1777)
    shutil.copy2(busybox, os.path.join(path, "bin/busybox"))
    os.chmod(os.path.join(path, "bin/busybox"), 0o755)
    out = subprocess.run([busybox, "--list-full"], check=True, capture_output=True,
                         text=True).stdout
    for rel in out.split():
        if "/" not in rel or rel == "bin/busybox":
            continue
        link = os.path.join(path, rel)
        if os.path.lexists(link):
            continue
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink("/bin/busybox", link)
    files = {
        "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        "etc/group": "root:x:0:\nnogroup:x:65534:\n",
        "etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "etc/hostname": "sandbox\n",
    }
    for rel, text in files.items():
        with open(os.path.join(path, rel), "w") as f:
            f.write(text)
    for tool in ("true", "sh"):
        if not os.path.lexists(os.path.join(path, "bin", tool)):
            raise BenchError(f"busybox has no '{tool}' applet")


# ---------------------------------------------------------------------------
# fork+exec and bwrap

class ExecClient:
    def __init__(self, argv):
        self.argv = argv

    def cycle(self):
        t0 = time.perf_counter()
        r = subprocess.run(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        t1 = time.perf_counter()
        if r.returncode != 0:
            raise BenchError(f"{' '.join(self.argv)}: exit {r.returncode}: "
                             f"{r.stderr.decode(errors='replace').strip()}")
        return {"cycle": t1 - t0}

    def close(self):
        pass


# ---------------------------------------------------------------------------
# crun (runs in a child process with its own mount namespace)



def crun_config(memory_bytes, pids, cgroups_path, userns):
    cfg = {
        "ociVersion": "1.0.0",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {k: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
                             for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "sandbox",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
        ],
        "linux": {
            "cgroupsPath": cgroups_path,
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "memory": {"limit": memory_bytes},
                "pids": {"limit": pids},
            },
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                            "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                            "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                              "/proc/sysrq-trigger"],
        },
    }
    if userns:
        # root in the container = root on the host (the rootfs is root-owned), so no
        # idmapping is needed; this only adds the cost of the user namespace itself.
        cfg["linux"]["namespaces"].append({"type": "user"})
        cfg["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 0, "size": 65536}]
        cfg["linux"]["gidMappings"] = [{"containerID": 0, "hostID": 0, "size": 65536}]
        # sysfs cannot be mounted in a user namespace that does not own the netns mount
        # in every kernel; bind the host's instead.
        cfg["mounts"][-1] = {"destination": "/sys", "type": "bind", "source": "/sys",
                             "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]}
    return cfg


class CrunClient:
    """One client: a bundle dir whose rootfs is an overlay mounted per cycle."""

    def __init__(self, idx, p, live):
        self.p = p
        self.live = live  # shared {"containers": set(), "mounts": set()} for cleanup
        self.base = os.path.join(p["tmp"], f"c{idx}")
        self.bundle = os.path.join(self.base, "bundle")
        self.rootfs = os.path.join(self.bundle, "rootfs")
        self.ovl = os.path.join(self.base, "ovl")
        os.makedirs(self.rootfs)
        self.prefix = f"{CRUN_ID_PREFIX}-{p['tag']}-{idx}"
        cfg = crun_config(p["memory_mb"] << 20, p["pids"], "/" + self.prefix, p["userns"])
        with open(os.path.join(self.bundle, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        self.seq = 0
        self.crun = [p["crun"], "--root", p["state"]]

    def cycle(self):
        self.seq += 1
        cid = f"{self.prefix}-{self.seq}"
        upper = os.path.join(self.ovl, "upper")
        work = os.path.join(self.ovl, "work")
        t0 = time.perf_counter()
        os.mkdir(self.ovl)
        os.mkdir(upper)
        os.mkdir(work)
        opts = f"lowerdir={self.p['rootfs']},upperdir={upper},workdir={work}"
        sys_mount("overlay", self.rootfs, "overlay", 0, opts)
        self.live["mounts"].add(self.rootfs)
        t1 = time.perf_counter()
        self.live["containers"].add(cid)
        r = subprocess.run(self.crun + ["run", "--bundle", self.bundle, cid],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        t2 = time.perf_counter()
        if r.returncode != 0:
            raise BenchError(f"crun run {cid}: exit {r.returncode}: "
                             f"{r.stderr.decode(errors='replace').strip()}")
        self.live["containers"].discard(cid)
        sys_umount(self.rootfs)
        self.live["mounts"].discard(self.rootfs)
        shutil.rmtree(self.ovl)
        t3 = time.perf_counter()
        return {"cycle": t3 - t0, "mount": t1 - t0, "crun_run": t2 - t1, "teardown": t3 - t2}

    def close(self):
        pass


def crun_cleanup(crun, state, live, tag):
    """Delete leftover containers, mounts and cgroups of this run."""
    ids = set(live.get("containers", ()))
    if os.path.isdir(state):
        ids.update(n for n in os.listdir(state) if n.startswith(CRUN_ID_PREFIX))
    for cid in sorted(ids):
        subprocess.run([crun, "--root", state, "delete", "-f", cid],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    for m in list(live.get("mounts", ())):
        try:
            sys_umount(m, MNT_DETACH)
        except OSError:
            pass
    prefix = f"{CRUN_ID_PREFIX}-{tag}-"
    root = "/sys/fs/cgroup"
    try:
        ctrls = os.listdir(root)
    except OSError:
        ctrls = []
    for ctrl in ctrls:
        d = os.path.join(root, ctrl)
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if n.startswith(prefix):
                try:
                    os.rmdir(os.path.join(d, n))
                except OSError:
                    pass


def crun_worker(params_path):
    """Entry point of the child process that runs the crun part."""
    with open(params_path) as f:
        p = json.load(f)
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, _raise_stopped)
    lc = libc()
    lc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != p["parent"]:
        return 1
    # Private mount namespace: the overlay mounts die with this process, and crun only
    # accepts this host's hybrid cgroup layout when the cgroup2 mount is out of sight.
    _check(lc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    sys_mount("none", "/", None, MS_REC | MS_PRIVATE)
    for m in p["hide_mounts"]:
        try:
            sys_umount(m, MNT_DETACH)
        except OSError as e:
            log(f"crun worker: {e}")
    live = {"containers": set(), "mounts": set()}
    results = []
    try:
        for n_clients in p["clients"]:
            log(f"  crun: {n_clients} client(s), {p['iterations']} cycles")
            r = run_clients(lambda i, n=n_clients: CrunClient(i + 10 * n, p, live),
                            n_clients, p["iterations"], p["warmup"])
            results.append({"clients": n_clients, **r})
            for i in range(n_clients):
                shutil.rmtree(os.path.join(p["tmp"], f"c{i + 10 * n_clients}"),
                              ignore_errors=True)
        with open(p["out"], "w") as f:
            json.dump(results, f)
        return 0
    except Stopped:
        return 130
    except BaseException as e:  # noqa: BLE001
        log(f"crun worker: {type(e).__name__}: {e}")
        return 1
    finally:
        crun_cleanup(p["crun"], p["state"], live, p["tag"])
        if os.getppid() != p["parent"]:
            # The parent was killed outright: remove its temp dir too.
            shutil.rmtree(p["parent_tmp"], ignore_errors=True)


def run_crun(args, rootfs, tmp):
    crun = shutil.which("crun")
    if not crun:
        raise BenchError("crun not installed (apt-get install crun)")
    if os.geteuid() != 0:
        raise BenchError("crun part needs root (overlay mounts, cgroups)")
    ctmp = os.path.join(tmp, "crun")
    os.makedirs(ctmp)
    tag = f"{os.getpid()}"
    hide = []
    # crun 1.x refuses a hybrid layout (v1 controllers + cgroup2 at .../unified).
    if os.path.ismount("/sys/fs/cgroup/unified"):
        hide.append("/sys/fs/cgroup/unified")
    p = {
        "crun": crun, "tmp": ctmp, "state": os.path.join(ctmp, "state"),
        "rootfs": rootfs, "tag": tag, "clients": args.clients,
        "iterations": args.iterations, "warmup": args.warmup,
        "memory_mb": args.crun_memory_mb, "pids": 512, "userns": args.crun_userns,
        "hide_mounts": hide, "out": os.path.join(ctmp, "result.json"),
        "parent": os.getpid(), "parent_tmp": tmp,
    }
    ppath = os.path.join(ctmp, "params.json")
    with open(ppath, "w") as f:
        json.dump(p, f)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_crun-worker", ppath],
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        rc = proc.wait()
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        # In case the worker died without cleaning up (its mounts die with it).
        crun_cleanup(crun, p["state"], {}, tag)
    if rc != 0:
        raise BenchError(f"crun worker failed (exit {rc})")
    with open(p["out"]) as f:
        return json.load(f)


# ---------------------------------------------------------------------------
# Warren HTTP API

class ApiError(BenchError):
    def __init__(self, method, path, status, body):
        self.status = status
        self.code = None
        msg = body.decode(errors="replace").strip()
        try:
            err = json.loads(body)["error"]
            self.code = err.get("code")
            msg = f"{err.get('code')}: {err.get('message')}"
        except Exception:  # noqa: BLE001
            pass
        super().__init__(f"{method} {path}: HTTP {status}: {msg[:500]}")


class _Conn(http.client.HTTPConnection):
    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _ConnTLS(http.client.HTTPSConnection):
    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Api:
    """One keep-alive connection."""

    def __init__(self, url, token, timeout=60.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise BenchError(f"bad --url {url!r}")
        cls = _Conn if u.scheme == "http" else _ConnTLS
        self.conn = cls(u.hostname, u.port, timeout=timeout)
        self.prefix = u.path.rstrip("/")
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
                self.conn.request(method, self.prefix + path, body=data, headers=headers)
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
                return resp.status, None
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw
        raise AssertionError("unreachable")

    def close(self):
        self.conn.close()


class WarrenClient:
    def __init__(self, args, live):
        self.api = Api(args.url, args.token, args.http_timeout)
        self.spec = {"image": args.image}
        if args.backend:
            self.spec["backend"] = args.backend
        self.argv = args.exec_argv
        self.live = live  # shared set of sandbox ids not yet deleted

    def cycle(self):
        t0 = time.perf_counter()
        _, sb = self.api.request("POST", "/v1/sandboxes", self.spec, expect=(201,))
        t1 = time.perf_counter()
        sid = sb["id"]
        self.live.add(sid)
        _, res = self.api.request("POST", f"/v1/sandboxes/{sid}/exec", {"argv": self.argv},
                                  expect=(200,))
        t2 = time.perf_counter()
        if not isinstance(res, dict) or res.get("exit_code") != 0:
            raise BenchError(f"exec {self.argv} in {sid}: {json.dumps(res)[:500]}")
        self.api.request("DELETE", f"/v1/sandboxes/{sid}", expect=(204,))
        t3 = time.perf_counter()
        self.live.discard(sid)
        return {"cycle": t3 - t0, "create": t1 - t0, "exec": t2 - t1,
                "create_exec": t2 - t0, "delete": t3 - t2}

    def close(self):
        self.api.close()


def _find_image(obj, name, tag):
    """Look for NAME:TAG anywhere in a layer listing of unknown exact shape."""
    want = f"{name}:{tag}"
    if isinstance(obj, dict):
        if obj.get("name") == name and str(obj.get("tag")) == tag:
            return True
        if obj.get("name") == want or obj.get("ref") == want:
            return True
        return any(_find_image(v, name, tag) for v in obj.values())
    if isinstance(obj, list):
        return any(_find_image(v, name, tag) for v in obj)
    return obj == want


def warren_prepare(args, rootfs):
    api = Api(args.url, args.token, 10.0)
    try:
        try:
            api.request("GET", "/healthz")
        except (OSError, http.client.HTTPException) as e:
            raise BenchError(f"Warren not reachable at {args.url}: {e}")
        if not args.token:
            raise BenchError("no token: set WARREN_TOKEN or --token, or make "
                             "/var/lib/warren/admin.token readable")
        name, _, tag = args.image.partition(":")
        _, layers = api.request("GET", "/v1/layers")
        if _find_image(layers, name, tag or "latest"):
            return
        warren_bin = os.environ.get("WARREN_BIN", "./build/warren")
        if not (os.path.isfile(warren_bin) and os.access(warren_bin, os.X_OK)):
            raise BenchError(f"image {args.image} not found and no warren CLI at {warren_bin} "
                             "(set WARREN_BIN)")
        log(f"  building image {args.image} from the busybox rootfs with {warren_bin}")
        env = dict(os.environ, WARREN_URL=args.url, WARREN_TOKEN=args.token)
        r = subprocess.run([warren_bin, "image", "build", args.image, "--from-dir", rootfs],
                           env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"warren image build failed (exit {r.returncode}): "
                             f"{(r.stderr or r.stdout).strip() or '(no output)'}")
    finally:
        api.close()


def warren_cleanup(args, live):
    if not live:
        return
    log(f"  deleting {len(live)} leftover sandbox(es)")
    api = Api(args.url, args.token, 10.0)
    try:
        for sid in list(live):
            try:
                api.request("DELETE", f"/v1/sandboxes/{sid}", expect=(204, 404))
                live.discard(sid)
            except Exception as e:  # noqa: BLE001
                log(f"  cleanup: delete {sid}: {e}")
    finally:
        api.close()


# ---------------------------------------------------------------------------
# main

def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Sandbox cycle benchmark: create -> first exec of `true` -> delete.")
    ap.add_argument("--url", default=os.environ.get("WARREN_URL", "http://127.0.0.1:7070"),
                    help="Warren API (default: $WARREN_URL or http://127.0.0.1:7070)")
    ap.add_argument("--token", default=None,
                    help="bearer token (default: $WARREN_TOKEN, $WARREN_HOME/token, "
                         "/var/lib/warren/admin.token)")
    ap.add_argument("--token-file", default=None, help="read the token from this file")
    ap.add_argument("--image", default="bench:busybox",
                    help="Warren image NAME:TAG; built from the busybox rootfs with "
                         "`$WARREN_BIN image build` if missing (default: bench:busybox)")
    ap.add_argument("--backend", default=None,
                    help="SandboxSpec backend to ask Warren for (default: server's default)")
    ap.add_argument("--exec-argv", default="true",
                    help="command for the first exec in Warren, split on spaces (default: true)")
    ap.add_argument("--iterations", "-n", type=int, default=200,
                    help="measured cycles per (system, clients) (default: 200)")
    ap.add_argument("--warmup", type=int, default=10,
                    help="unmeasured cycles per client before measuring (default: 10)")
    ap.add_argument("--clients", default="1,2",
                    help="comma-separated concurrent client counts (default: 1,2)")
    ap.add_argument("--only", default=",".join(SYSTEMS),
                    help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all)")
    ap.add_argument("--json", metavar="FILE", help="also write the results to FILE")
    ap.add_argument("--phases", action="store_true",
                    help="also print every sub-phase (Warren create/exec, crun mount/run/...)")
    ap.add_argument("--crun-memory-mb", type=int, default=256,
                    help="memory limit in the crun config (default: 256)")
    ap.add_argument("--crun-userns", action="store_true",
                    help="add a user namespace (identity-mapped) to the crun config")
    ap.add_argument("--http-timeout", type=float, default=60.0, help="seconds (default: 60)")
    args = ap.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in args.only:
        if s not in SYSTEMS:
            ap.error(f"--only: unknown system {s!r} (choose from {', '.join(SYSTEMS)})")
    try:
        args.clients = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        ap.error("--clients: expected comma-separated integers")
    if not args.clients or min(args.clients) < 1:
        ap.error("--clients: counts must be >= 1")
    if args.iterations < 1 or args.warmup < 0:
        ap.error("--iterations must be >= 1 and --warmup >= 0")
    args.exec_argv = args.exec_argv.split()
    if args.token is None:
        args.token = resolve_token(args.token_file)
    return args


def resolve_token(token_file):
    if token_file:
        with open(token_file) as f:
            return f.read().strip()
    if os.environ.get("WARREN_TOKEN"):
        return os.environ["WARREN_TOKEN"].strip()
    home = os.environ.get("WARREN_HOME", os.path.expanduser("~/.config/warren"))
    for path in (os.path.join(home, "token"), "/var/lib/warren/admin.token"):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            continue
    return ""


ROW_LABELS = {
    ("warren", "cycle"): "warren  create+exec+delete",
    ("warren", "create_exec"): "warren  create->exec result",
    ("warren", "delete"): "warren  delete",
    ("warren", "create"): "warren  create",
    ("warren", "exec"): "warren  first exec",
    ("crun", "cycle"): "crun run (overlay, 5 ns)",
    ("crun", "mount"): "crun    overlay mount",
    ("crun", "crun_run"): "crun    crun run",
    ("crun", "teardown"): "crun    umount+rm",
    ("bwrap", "cycle"): "bwrap --unshare-all",
    ("fork", "cycle"): "fork+exec /bin/true",
}
TABLE_PHASES = {"warren": ["cycle", "create_exec", "delete"]}
ALL_PHASES = {"warren": ["cycle", "create_exec", "create", "exec", "delete"],
              "crun": ["cycle", "mount", "crun_run", "teardown"]}


def format_table(rows):
    head = f"{'system':<30} {'clients':>7} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} " \
           f"{'p99 ms':>8} {'cycles/s':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("error"):
            err = " ".join(r["error"].split())
            lines.append(f"{r['label']:<30} {r['clients']:>7} FAILED: {err[:300]}")
            continue
        rate = f"{r['cycles_per_s']:9.1f}" if r.get("cycles_per_s") is not None else f"{'':>9}"
        lines.append(f"{r['label']:<30} {r['clients']:>7} {r['n']:>5} {r['p50_ms']:8.2f} "
                     f"{r['p95_ms']:8.2f} {r['p99_ms']:8.2f} {rate}")
    return "\n".join(lines)


def result_rows(system, clients, res, show_phases, label=None):
    phases = (ALL_PHASES if show_phases else TABLE_PHASES).get(system, ["cycle"])
    rows = []
    for ph in phases:
        s = summarize(res["phases"].get(ph, []))
        if not s["n"]:
            continue
        row = {"system": system, "phase": ph, "clients": clients,
               "label": (label if label and ph == "cycle"
                         else ROW_LABELS.get((system, ph), f"{system} {ph}")), **s,
               "wall_s": res["wall_s"], "cycles_per_s": None}
        if ph == "cycle":
            row["cycles_per_s"] = res["n"] / res["wall_s"] if res["wall_s"] > 0 else None
        rows.append(row)
    return rows


def main(argv):
    if argv[:1] == ["--_crun-worker"]:
        return crun_worker(argv[1])
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    load = os.getloadavg()
    if load[0] > 0.5 * (os.cpu_count() or 1):
        log(f"warning: load average {load[0]:.2f} on {os.cpu_count()} CPUs: "
            "numbers will be noisy")
    tmp = tempfile.mkdtemp(prefix="warren-bench-")
    rows = []
    failed = False
    warren_live = set()
    try:
        rootfs = os.path.join(tmp, "rootfs")
        build_rootfs(rootfs)
        for system in [s for s in SYSTEMS if s in args.only]:
            log(f"{system}:")
            try:
                if system == "crun":
                    for r in run_crun(args, rootfs, tmp):
                        rows += result_rows("crun", r["clients"], r, args.phases,
                                            "crun run (overlay, 6 ns)" if args.crun_userns
                                            else None)
                    continue
                if system == "warren":
                    warren_prepare(args, rootfs)
                    make = lambda i: WarrenClient(args, warren_live)  # noqa: E731
                elif system == "bwrap":
                    bwrap = shutil.which("bwrap")
                    if not bwrap:
                        raise BenchError("bwrap not installed (apt-get install bubblewrap)")
                    argv_ = [bwrap, "--unshare-all", "--ro-bind", rootfs, "/",
                             "--proc", "/proc", "--dev", "/dev", "/bin/true"]
                    make = lambda i, a=argv_: ExecClient(a)  # noqa: E731
                else:
                    make = lambda i: ExecClient(["/bin/true"])  # noqa: E731
                for n in args.clients:
                    log(f"  {system}: {n} client(s), {args.iterations} cycles")
                    try:
                        res = run_clients(make, n, args.iterations, args.warmup)
                    finally:
                        if system == "warren":
                            warren_cleanup(args, warren_live)
                    rows += result_rows(system, n, res, args.phases)
            except Exception as e:  # noqa: BLE001 - report, go on with the next system
                failed = True
                msg = str(e) if isinstance(e, BenchError) else f"{type(e).__name__}: {e}"
                log(f"  {system}: FAILED: {msg}")
                rows.append({"system": system, "phase": "cycle", "clients": "-",
                             "label": ROW_LABELS[(system, "cycle")], "error": msg})
    except (KeyboardInterrupt, Stopped):
        log("interrupted; cleaning up")
        if "warren" in args.only:
            warren_cleanup(args, warren_live)
        failed = True
        return 130
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if rows:
            print(format_table(rows), flush=True)
    if args.json:
        doc = {
            "benchmark": "create -> first exec -> delete",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                     "loadavg_at_start": load,
                     "python": platform.python_version()},
            "params": {"url": args.url, "image": args.image, "iterations": args.iterations,
                       "warmup": args.warmup, "clients": args.clients, "only": args.only,
                       "crun_memory_mb": args.crun_memory_mb, "crun_userns": args.crun_userns},
            "results": rows,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
