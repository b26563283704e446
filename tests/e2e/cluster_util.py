"""Cluster pieces for end-to-end tests: a real etcd (Debian's etcd-server) on free loopback
ports, and `warren node` processes. Each test that starts them stops them."""
import base64
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from typing import Dict, List, Optional

import e2e_util


free_port = e2e_util.free_port


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _get(post, key: str) -> Optional[str]:
    """The value of `key` through etcd's JSON gateway (`post(path, body)`), or None."""
    r = post("/v3/kv/range", {"key": _b64(key)})
    kvs = r.get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def _keys(post, prefix: str) -> List[str]:
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    r = post("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end), "keys_only": True})
    return [base64.b64decode(kv["key"]).decode() for kv in r.get("kvs", [])]


def build_test_image(api, ref: str = "c:1") -> None:
    """The busybox test image `ref`, built through `api`'s CLI into the cluster's layers."""
    from conftest import _build_rootfs, _scratch_base, safe_rmtree
    from pathlib import Path
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-rootfs-", dir=_scratch_base()))
    try:
        _build_rootfs(root)
        r = api.cli("image", "build", ref, "--from-dir", str(root), timeout=300)
        assert r.returncode == 0, r.stderr
    finally:
        safe_rmtree(str(root))


class Etcd:
    """One etcd member on loopback; its data in a temporary directory removed at stop()."""

    def __init__(self, scratch: str, log_path: str):
        self.dir = tempfile.mkdtemp(prefix="warren-e2e-etcd-", dir=scratch)
        self.client_port, self.peer_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "e2e", "--data-dir", self.dir,
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-cluster", f"e2e=http://127.0.0.1:{self.peer_port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                self.get("/health-probe")
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("etcd did not start")

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def get(self, key: str) -> Optional[str]:
        return _get(self._post, key)

    def keys(self, prefix: str) -> List[str]:
        return _keys(self._post, prefix)

    def put(self, key: str, value: str) -> None:
        self._post("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        subprocess.run(["rm", "-rf", self.dir])


class EtcdCluster:
    """`n` etcd members on loopback, each of which can be stopped and started again on its
    data (a member down, quorum lost, the cluster back). `url` names every member, as the
    roles take it (--etcd URL,URL,...)."""

    def __init__(self, scratch: str, log_dir: str, n: int = 3):
        self.n = n
        self.dirs = [tempfile.mkdtemp(prefix=f"warren-e2e-etcd{i}-", dir=scratch)
                     for i in range(n)]
        self.client_ports = [free_port() for _ in range(n)]
        self.peer_ports = [free_port() for _ in range(n)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.client_ports]
        self.url = ",".join(self.urls)
        self.initial = ",".join(f"m{i}=http://127.0.0.1:{self.peer_ports[i]}" for i in range(n))
        self.log_dir = log_dir
        self.procs: List[Optional[subprocess.Popen]] = [None] * n
        self.started_once = [False] * n
        for i in range(n):
            self.start(i, wait=False)
        if not e2e_util.wait_until(self.healthy, timeout=60):
            self.close()
            raise RuntimeError("etcd cluster did not start")

    def start(self, i: int, wait: bool = True) -> None:
        log = open(os.path.join(self.log_dir, f"etcd{i}.log"), "ab")
        args = ["etcd", "--name", f"m{i}", "--data-dir", self.dirs[i],
                "--listen-client-urls", self.urls[i], "--advertise-client-urls", self.urls[i],
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-cluster", self.initial, "--initial-cluster-state",
                "existing" if self.started_once[i] else "new",
                "--heartbeat-interval", "100", "--election-timeout", "1000"]
        self.procs[i] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.started_once[i] = True
        if wait and not e2e_util.wait_until(lambda: self._member_ok(i), timeout=60):
            raise RuntimeError(f"etcd member {i} did not come back; its log ends:\n"
                               + self.log_tail(i))

    def log_tail(self, i: int, lines: int = 30) -> str:
        try:
            with open(os.path.join(self.log_dir, f"etcd{i}.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def stop(self, i: int) -> None:
        p = self.procs[i]
        if p and p.poll() is None:
            p.kill()  # a member that dies, not one that leaves
            p.wait()
        self.procs[i] = None

    def _member_ok(self, i: int) -> bool:
        try:
            with urllib.request.urlopen(self.urls[i] + "/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def healthy(self) -> bool:
        return any(self._member_ok(i) for i in range(self.n) if self.procs[i])

    def _post(self, path: str, body: dict) -> dict:
        for i in range(self.n):
            if not self.procs[i]:
                continue
            req = urllib.request.Request(self.urls[i] + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return json.loads(r.read())
            except OSError:
                continue
        raise OSError("no etcd member answered")

    def get(self, key: str) -> Optional[str]:
        return _get(self._post, key)

    def keys(self, prefix: str) -> List[str]:
        return _keys(self._post, prefix)

    def close(self) -> None:
        for i in range(self.n):
            p = self.procs[i]
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for d in self.dirs:
            subprocess.run(["rm", "-rf", d])


class Node:
    """A `warren node` process: its own data dir, port and name."""

    def __init__(self, bin_path: str, etcd: Etcd, name: str, data_dir: str, log_path: str,
                 extra: Optional[List[str]] = None):
        self.bin, self.etcd, self.name, self.data_dir = bin_path, etcd, name, data_dir
        self.host, self.port = "127.0.0.1", free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.extra = extra or []
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "node", "--etcd", self.etcd.url, "--listen", f"127.0.0.1:{self.port}",
             "--data-dir", self.data_dir, "--name", self.name] + self.extra,
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"warren node {self.name} exited {self.proc.returncode}:\n"
                                   + self.log_tail())
            # Serving (a record of a killed earlier run may linger until its lease expires)
            # and joined.
            if self._healthy() and self.record() is not None:
                return
            time.sleep(0.1)
        raise RuntimeError(f"warren node {self.name} did not join:\n" + self.log_tail())

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def record(self) -> Optional[dict]:
        v = self.etcd.get(f"/warren/node/{self.name}/record")
        return json.loads(v) if v else None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else 0

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def request(self, method: str, path: str, body=None, token: Optional[str] = None,
                timeout: float = 120):
        """(status, bytes) of a request to the node's API (no token: none is sent)."""
        r = e2e_util.http_request(self, method, path, body, auth=token is not None, token=token,
                                  timeout=timeout)
        return r.status, r.body


class ApiServer:
    """A `warren apiserver` process; `env` runs the CLI and SDK against it."""

    def __init__(self, bin_path: str, etcd: Etcd, data_dir: str, layer_store: str, log_path: str,
                 home: str, extra: Optional[List[str]] = None):
        self.bin, self.etcd, self.data_dir = bin_path, etcd, data_dir
        self.layer_store, self.log_path, self.home = layer_store, log_path, home
        self.host, self.port = "127.0.0.1", free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra = extra or []
        self.proc: Optional[subprocess.Popen] = None
        self.token = ""
        self.env: Dict[str, str] = {}

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "apiserver", "--etcd", self.etcd.url, "--listen",
             f"127.0.0.1:{self.port}", "--data-dir", self.data_dir, "--layer-store",
             self.layer_store] + self.extra, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"warren apiserver exited {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2):
                    break
            except OSError:
                time.sleep(0.1)
        with open(os.path.join(self.data_dir, "admin.token")) as f:
            self.token = f.read().strip()
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARREN_")}
        env.update({"WARREN_URL": self.url, "WARREN_TOKEN": self.token, "WARREN_HOME": self.home})
        self.env = env

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([self.bin, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def request(self, method: str, path: str, body=None, timeout: float = 120):
        """(status, bytes) of a request with the admin token."""
        r = e2e_util.http_request(self, method, path, body, timeout=timeout)
        return r.status, r.body

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
