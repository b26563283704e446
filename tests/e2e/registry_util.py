"""A real `docker-registry` (Debian's docker/distribution) on 127.0.0.1 for pull tests.

Three variants:
  "http"   plain HTTP (Warren falls back from https for loopback registries by itself)
  "https"  TLS with a server certificate for IP 127.0.0.1 from a throw-away CA made with the
           `openssl` CLI (`Registry.ca_file` is what `warren --registry-ca` needs)
  "basic"  plain HTTP with `auth: htpasswd:` (a bcrypt entry for `Registry.user`/`password`)
  "token"  plain HTTP with `auth: token:`: the realm is a small token server run in a thread
           here on loopback; it checks Basic credentials (`Registry.user`/`password`) and
           issues RS256 JWTs whose `x5c` header carries the signing certificate chain, the
           root of which is the registry's `rootcertbundle`.

Images get in with `skopeo copy` from an OCI layout. Nothing here talks to anything but
127.0.0.1; every process is stopped by its own PID and every temp dir removed.

    with Registry("https") as reg:
        digest = reg.push(layout_dir, "v1", "e2e/img")
        ... warren image build x:1 --from-oci reg.ref("e2e/img", "v1") --registry-ca reg.ca_file
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Tuple

import pytest

import e2e_util

REGISTRY_BIN = "/usr/bin/docker-registry"
TOOLS = {"docker-registry": "docker-registry", "skopeo": "skopeo", "openssl": "openssl"}


def require_tools(*names: str) -> None:
    """Fail (not skip) the test when a tool the OCI tests need is missing."""
    for n in names:
        path = REGISTRY_BIN if n == "docker-registry" else shutil.which(n)
        if not path or not os.access(path, os.X_OK):
            pytest.fail(f"{n} is not installed (apt-get install {TOOLS.get(n, n)}); "
                        "the OCI registry tests need it")


def clean_env(extra: Optional[dict] = None) -> dict:
    """The environment for helper processes: no proxies (loopback only), no REGISTRY_* overrides
    of the registry's config, no stray registry credentials."""
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and not k.startswith("REGISTRY_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra or {})
    return env


free_port = e2e_util.free_port


def _run(argv: List[str], what: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, env=clean_env(kw.pop("env", None)), **kw)
    if r.returncode != 0:
        raise AssertionError(f"{what} failed ({r.returncode}): {' '.join(argv)}\n"
                             f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


# -- certificates (openssl CLI) ------------------------------------------------------------
def make_ca(d: str, name: str) -> Tuple[str, str]:
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
          "-days", "2", "-subj", f"/CN=warren e2e {name}", "-set_serial", "1",
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign"], f"openssl CA {name}")
    return key, crt


def make_cert(d: str, name: str, ca: Tuple[str, str], ext: str, serial: int) -> Tuple[str, str]:
    """A key and a certificate signed by `ca` with the x509v3 extensions in `ext`."""
    key, csr, crt = (os.path.join(d, name + s) for s in (".key", ".csr", ".crt"))
    extfile = os.path.join(d, name + ".ext")
    with open(extfile, "w") as f:
        f.write(ext)
    _run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
          "-subj", f"/CN=warren e2e {name}"], f"openssl key {name}")
    _run(["openssl", "x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0], "-out", crt,
          "-days", "2", "-set_serial", str(serial), "-extfile", extfile], f"openssl sign {name}")
    return key, crt


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash for htpasswd (glibc's crypt: Debian's python3 has no bcrypt module)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    h = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
    if not h or not h.startswith("$2"):
        raise AssertionError(f"this libc's crypt() cannot make bcrypt hashes (got {h!r})")
    return h


def _pem_to_der_b64(pem_path: str) -> str:
    with open(pem_path) as f:
        pem = f.read()
    body = pem.split("-----BEGIN CERTIFICATE-----")[1].split("-----END CERTIFICATE-----")[0]
    return "".join(body.split())  # x5c wants base64 DER: exactly the PEM body


# -- token server -----------------------------------------------------------------------------
class TokenServer:
    """The token realm: GET /token?service=S&scope=repository:NAME:ACTIONS with Basic auth."""

    def __init__(self, user: str, password: str, signing_key: str, chain: List[str],
                 issuer: str, service: str):
        import jwt  # python3-jwt; imported here so a missing module fails the test loudly

        self._jwt = jwt
        self.user, self.password = user, password
        with open(signing_key, "rb") as f:
            self.key = f.read()
        self.x5c = [_pem_to_der_b64(c) for c in chain]
        self.issuer, self.service = issuer, service
        self.requests: List[dict] = []  # {"scope", "user", "granted"}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def do_GET(self):
                outer._handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.realm = f"http://127.0.0.1:{self.port}/token"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="e2e-token-server",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        u = urllib.parse.urlparse(h.path)
        q = urllib.parse.parse_qs(u.query)
        scopes = [s for v in q.get("scope", []) for s in v.split(" ") if s]
        user = None
        auth = h.headers.get("Authorization", "")
        if auth.lower().startswith("basic "):
            try:
                user, _, pw = base64.b64decode(auth[6:].strip()).decode().partition(":")
            except Exception:
                user, pw = None, None
            if user != self.user or pw != self.password:
                user = None
        ok = u.path == "/token" and user is not None
        with self.lock:
            self.requests.append({"scope": scopes, "user": user, "granted": ok,
                                  "service": q.get("service", [""])[0]})
        if not ok:
            body = b'{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}'
            h.send_response(401)
            h.send_header("WWW-Authenticate", 'Basic realm="warren-e2e-token"')
        else:
            now = int(time.time())
            access = []
            for s in scopes:
                rest, _, actions = s.rpartition(":")
                typ, _, name = rest.partition(":")
                access.append({"type": typ, "name": name,
                               "actions": [a for a in actions.split(",") if a]})
            claims = {"iss": self.issuer, "sub": user, "aud": self.service, "exp": now + 600,
                      "nbf": now - 60, "iat": now, "jti": uuid.uuid4().hex, "access": access}
            token = self._jwt.encode(claims, self.key, algorithm="RS256", headers={"x5c": self.x5c})
            if isinstance(token, bytes):
                token = token.decode()
            body = json.dumps({"token": token, "access_token": token, "expires_in": 600,
                               "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}).encode()
            h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


def skopeo_copy(src: str, dst: str, *flags: str, scratch: str) -> str:
    """`skopeo copy FLAGS SRC DST` with no policy file, no stored credentials and no proxy;
    returns the digest of the manifest written. `scratch` is a directory for its files."""
    require_tools("skopeo")
    digestfile = os.path.join(scratch, f"digest-{uuid.uuid4().hex}")
    argv = ["skopeo", "--insecure-policy", "copy", "--quiet", "--retry-times", "0",
            "--digestfile", digestfile, *flags, src, dst]
    _run(argv, "skopeo copy", timeout=120,
         env={"REGISTRY_AUTH_FILE": os.path.join(scratch, "no-auth.json"), "HOME": scratch})
    try:
        with open(digestfile) as f:
            return f.read().strip()
    finally:
        os.unlink(digestfile)


# -- the registry -------------------------------------------------------------------------------
class Registry:
    SERVICE = "warren-e2e-registry"
    ISSUER = "warren-e2e-token-issuer"

    def __init__(self, mode: str = "http", base_dir: Optional[str] = None,
                 user: str = "e2e-user", password: str = "e2e-pass-42"):
        if mode not in ("http", "https", "basic", "token"):
            raise ValueError(mode)
        self.mode, self.user, self.password = mode, user, password
        self._base_parent = base_dir
        self.dir = ""
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.token_server: Optional[TokenServer] = None
        self.ca_file = ""    # https: the CA that signed the registry's certificate
        self.cert_dir = ""   # https: for skopeo --dest-cert-dir (holds ca.crt)
        self.log_path = ""

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def scheme(self) -> str:
        return "https" if self.mode == "https" else "http"

    def ref(self, repo: str, tag: Optional[str] = None, digest: Optional[str] = None) -> str:
        r = f"{self.host}/{repo}"
        if tag:
            r += ":" + tag
        if digest:
            r += "@" + digest
        return r

    # -- lifecycle --
    def __enter__(self) -> "Registry":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        require_tools("docker-registry", "skopeo", "openssl")
        self.dir = tempfile.mkdtemp(prefix=f"warren-e2e-registry-{self.mode}-", dir=self._base_parent)
        storage = os.path.join(self.dir, "storage")
        os.makedirs(storage)
        self.log_path = os.path.join(self.dir, "registry.log")
        self.port = free_port()
        http_cfg: dict = {"addr": self.host, "secret": "warren-e2e-" + uuid.uuid4().hex,
                          "headers": {"X-Content-Type-Options": ["nosniff"]}}
        cfg: dict = {
            "version": "0.1",
            "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
            "storage": {"filesystem": {"rootdirectory": storage}, "delete": {"enabled": True},
                        "maintenance": {"uploadpurging": {"enabled": False}}},
            "http": http_cfg,
        }
        certs = os.path.join(self.dir, "certs")
        os.makedirs(certs)
        if self.mode == "https":
            ca = make_ca(certs, "registry-ca")
            key, crt = make_cert(certs, "registry", ca,
                                 "basicConstraints=critical,CA:FALSE\n"
                                 "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                 "extendedKeyUsage=serverAuth\n"
                                 "subjectAltName=IP:127.0.0.1,DNS:localhost\n", serial=2)
            http_cfg["tls"] = {"certificate": crt, "key": key}
            self.ca_file = ca[1]
            self.cert_dir = os.path.join(self.dir, "skopeo-certs")
            os.makedirs(self.cert_dir)
            shutil.copy(ca[1], os.path.join(self.cert_dir, "ca.crt"))
        if self.mode == "basic":
            htpasswd = os.path.join(self.dir, "htpasswd")
            with open(htpasswd, "w") as f:
                f.write(f"{self.user}:{bcrypt_hash(self.password)}\n")
            cfg["auth"] = {"htpasswd": {"realm": "warren-e2e-basic", "path": htpasswd}}
        if self.mode == "token":
            root = make_ca(certs, "token-root")
            skey, scrt = make_cert(certs, "token-signer", root,
                                   "basicConstraints=critical,CA:FALSE\n"
                                   "keyUsage=critical,digitalSignature\n", serial=3)
            self.token_server = TokenServer(self.user, self.password, skey, [scrt, root[1]],
                                            self.ISSUER, self.SERVICE)
            self.token_server.start()
            cfg["auth"] = {"token": {"realm": self.token_server.realm, "service": self.SERVICE,
                                     "issuer": self.ISSUER, "rootcertbundle": root[1]}}
        conf = os.path.join(self.dir, "config.yml")
        for attempt in range(3):
            with open(conf, "w") as f:
                json.dump(cfg, f, indent=1)  # JSON is YAML
            log = open(self.log_path, "ab")
            try:
                self.proc = subprocess.Popen([REGISTRY_BIN, "serve", conf], stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=clean_env(), start_new_session=True, cwd=self.dir)
            finally:
                log.close()
            try:
                self._wait_ready()
                return
            except AssertionError:
                # The free port was taken in between: try another one.
                if attempt == 2 or self.proc.poll() is None or "address already in use" not in self.log_tail():
                    raise
                self.port = free_port()
                http_cfg["addr"] = self.host

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        ctx = ssl.create_default_context(cafile=self.ca_file) if self.mode == "https" else None
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=ctx))
        want = 401 if self.mode in ("basic", "token") else 200
        last = ""
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"docker-registry exited with {self.proc.returncode}:\n"
                                     f"{self.log_tail()}")
            try:
                with opener.open(f"{self.scheme}://{self.host}/v2/", timeout=2) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            except OSError as e:
                status, last = 0, str(e)
            if status == want:
                return
            if status:
                last = f"HTTP {status}"
            if time.time() > deadline:
                raise AssertionError(f"docker-registry on {self.host} not ready in {timeout}s "
                                     f"({last}):\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.proc = None
        if self.token_server is not None:
            self.token_server.stop()
            self.token_server = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except OSError:
            return "(no registry log)"

    # -- content --
    def push(self, layout: str, src_tag: str, repo: str, tag: Optional[str] = None,
             all_platforms: bool = False, fmt: Optional[str] = None) -> str:
        """`skopeo copy oci:LAYOUT:SRC_TAG docker://HOST/REPO:TAG`; returns the pushed
        manifest's digest (the index's with all_platforms). fmt "v2s2" converts to Docker
        media types (manifest v2 schema 2, manifest list) on the way."""
        assert self.dir, "registry not started"
        flags = []
        if self.mode == "https":
            flags += ["--dest-cert-dir", self.cert_dir]
        else:
            flags += ["--dest-tls-verify=false"]
        if self.mode in ("basic", "token"):
            flags += ["--dest-creds", f"{self.user}:{self.password}"]
        if all_platforms:
            flags += ["--all"]
        if fmt:
            flags += ["--format", fmt]
        return skopeo_copy(f"oci:{layout}:{src_tag}", f"docker://{self.ref(repo, tag or src_tag)}",
                           *flags, scratch=self.dir)

    def manifest(self, repo: str, reference: str) -> Optional[Tuple[str, str]]:
        """(media type, digest) of REPO:REFERENCE as the registry serves it (HEAD), or None if
        absent. Only for the unauthenticated variants."""
        assert self.mode in ("http", "https")
        ctx = ssl.create_default_context(cafile=self.ca_file) if self.mode == "https" else None
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=ctx))
        accept = ", ".join(["application/vnd.oci.image.index.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json",
                            "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"])
        req = urllib.request.Request(f"{self.scheme}://{self.host}/v2/{repo}/manifests/{reference}",
                                     method="HEAD", headers={"Accept": accept})
        try:
            with opener.open(req, timeout=10) as r:
                return r.headers.get("Content-Type", ""), r.headers.get("Docker-Content-Digest", "")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
