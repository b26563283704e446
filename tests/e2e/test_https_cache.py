"""The egress proxy's package cache over HTTPS: for the hosts the server intercepts
(--proxy-intercept), the proxy verifies the real server (here against the test CA, given by
--proxy-upstream-ca), answers the sandbox with a certificate of the node's CA, which egress
sandboxes trust through files and variables the node sets, and caches package downloads as
it does plain-HTTP ones. Real clients: pip, curl and Node.js in a Debian sandbox. The only
hosts reached are in a network namespace this module makes (conftest.NET_HOSTS names them)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import conftest
import e2e_util
from conftest import TLS_UPSTREAM, make_test_leaf

HERE = Path(__file__).resolve().parent
UP2, UP3 = f"{TLS_UPSTREAM}.2", f"{TLS_UPSTREAM}.3"
WHEEL = "warren_hello-1.0-py3-none-any.whl"
WHEEL_PATH = f"/packages/9a/0b/{WHEEL}"
TARBALL_PATH = "/warren-hello/-/warren-hello-1.0.0.tgz"


def _sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def _leaf(directory: Path, name: str, sans: list[str], ca: dict | None) -> tuple[str, str]:
    """A server certificate for the DNS names `sans`: from the test CA, or self-signed when `ca` is None."""
    return make_test_leaf(str(directory), name, [f"DNS:{s}" for s in sans], ca)


def _wheel() -> bytes:
    """A real, minimal wheel (PEP 427) of the package warren_hello."""
    files = {
        "warren_hello/__init__.py": b"def hello():\n    return 'hello from a cached wheel'\n",
        "warren_hello-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: warren-hello\nVersion: 1.0\n",
        "warren_hello-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: warren-tests\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "warren_hello-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("warren_hello-1.0.dist-info/RECORD", record)
    return buf.getvalue()


@pytest.fixture(scope="module")
def tls_upstream(tmp_path_factory, server):
    """The test hosts: UP2 serves pypi.test, files.test, npm.test and passthrough.test with
    certificates of the test CA; UP3 serves untrusted.test with a self-signed one."""
    ns, veth = f"wt-tls-{os.getpid()}", f"wtt{os.getpid() % 100000}"
    root = tmp_path_factory.mktemp("tls-www")
    certs = tmp_path_factory.mktemp("tls-certs")
    log = root.parent / "tls-requests.log"
    log.write_text("")
    wheel = _wheel()
    (root / WHEEL_PATH.lstrip("/")).parent.mkdir(parents=True)
    (root / WHEEL_PATH.lstrip("/")).write_bytes(wheel)
    simple = root / "simple/warren-hello"
    simple.mkdir(parents=True)
    sha = hashlib.sha256(wheel).hexdigest()
    (simple / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="https://files.test{WHEEL_PATH}#sha256={sha}">{WHEEL}</a></body></html>\n')
    (root / TARBALL_PATH.lstrip("/")).parent.mkdir(parents=True)
    (root / TARBALL_PATH.lstrip("/")).write_bytes(os.urandom(300_000))
    (root / "hello.txt").write_text("hello over tls\n")
    good = _leaf(certs, "good", ["pypi.test", "files.test", "npm.test", "passthrough.test"], server.test_ca)
    bad = _leaf(certs, "bad", ["untrusted.test"], None)
    proc = None
    try:
        proc = e2e_util.start_test_hosts(ns, veth, TLS_UPSTREAM, (UP2, UP3), [
            "/usr/bin/python3", str(HERE / "tls_upstream.py"), str(root), str(log),
            f"{UP2}:{good[0]}:{good[1]}", f"{UP3}:{bad[0]}:{bad[1]}"])
        yield {"root": root, "log": log, "wheel": wheel}
    finally:
        e2e_util.stop_test_hosts(proc, ns, veth)


@pytest.fixture(scope="module")
def pip_image(tools_image):
    """A Debian userland with the real clients: pip, curl and Node.js."""
    return tools_image


ALLOW = ["pypi.test:443/tcp", "files.test:443/tcp", "npm.test:443/tcp", "passthrough.test:443/tcp",
         "untrusted.test:443/tcp"]


def make(server, image, sandboxes, allow=ALLOW, mode="egress", beside=None):
    """A sandbox; `beside`: on the node another one runs on (a node keeps its own package
    cache, so a hit needs the same node; on `warren serve` there is only the one)."""
    spec = {"image": image}
    if mode == "egress":
        spec["network"] = {"mode": "egress", "allow": list(allow)}
    if beside is not None:
        spec["node_selector"] = {"warren.node": beside.node}
    sb = server.client().create(spec)
    sandboxes.append(sb.id)
    return sb


def py(sb, body: str, timeout: int = 60):
    """Runs FETCH and then `body` in the sandbox."""
    r = sb.run(["python3", "-c", FETCH + textwrap.dedent(body)], timeout=timeout)
    assert r.exit_code == 0, r.raw
    return r.stdout


def requests_since(log: Path, mark: int) -> list[list[str]]:
    return [l.split() for l in log.read_text().splitlines()[mark:]]


def cache_bytes(server, sandbox_id: str) -> int:
    text = server.http("GET", "/metrics").body.decode()
    # A cluster's API servers label each sample with its node as well.
    m = re.search(rf'warren_egress_sandbox_bytes_total\{{(?:node="[^"]+",)?sandbox="{sandbox_id}",source="cache"\}} (\d+)',
                  text)
    return int(m.group(1)) if m else 0


# Through the proxy by hand: CONNECT, then TLS with the default context (which the
# sandbox's SSL_CERT_FILE feeds), then one request; reports the certificate's issuer.
FETCH = """
import json, os, socket, ssl, sys
def fetch(host, path="/hello.txt", host_header=None, verify=True):
    proxy = os.environ["https_proxy"].split("//")[1].rstrip("/")
    ph, pp = proxy.rsplit(":", 1)
    s = socket.create_connection((ph, int(pp)), timeout=10)
    s.sendall(f"CONNECT {host}:443 HTTP/1.1\\r\\nHost: {host}:443\\r\\n\\r\\n".encode())
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        d = s.recv(4096)
        if not d: break
        head += d
    status = int(head.split()[1])
    if status != 200:
        err = [l for l in head.decode(errors="replace").split("\\r\\n") if l.lower().startswith("x-warren-error")]
        return {"connect": status, "error": err[0] if err else head.decode(errors="replace")}
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    try:
        t = ctx.wrap_socket(s, server_hostname=host)
    except ssl.SSLError as e:
        return {"connect": 200, "tls": str(e)}
    der = t.getpeercert(binary_form=True)
    open("/tmp/peer.pem", "w").write(ssl.DER_cert_to_PEM_cert(der))
    issuer = dict(x[0] for x in ssl._ssl._test_decode_cert("/tmp/peer.pem")["issuer"])
    t.sendall(f"GET {path} HTTP/1.1\\r\\nHost: {host_header or host}\\r\\nConnection: close\\r\\n\\r\\n".encode())
    body = b""
    while True:
        d = t.recv(65536)
        if not d: break
        body += d
    return {"connect": 200, "issuer": issuer.get("commonName"), "status": int(body.split()[1]), "body": body.decode(errors="replace")}
"""


def test_pip_installs_over_https_then_from_the_cache(server, pip_image, sandboxes, tls_upstream):
    """The real client: pip installs a wheel from an HTTPS index in two sandboxes; the second
    download comes from the cache (nothing fetched upstream but the index's revalidation)."""
    log = tls_upstream["log"]
    script = ("python3 -m pip install -q --no-cache-dir --disable-pip-version-check --no-deps --target /tmp/t "
              "--index-url https://pypi.test/simple/ warren-hello && "
              "PYTHONPATH=/tmp/t python3 -c 'import warren_hello; print(warren_hello.hello())'")
    runs = []
    for _ in range(2):
        sb = make(server, pip_image, sandboxes, beside=runs[0][0] if runs else None)
        mark = len(log.read_text().splitlines())
        r = sb.run(script, timeout=180)
        assert r.exit_code == 0, r.raw
        assert "hello from a cached wheel" in r.stdout
        runs.append((sb, requests_since(log, mark)))
    (_, first), (second_sb, second) = runs
    assert ["files.test", "GET", WHEEL_PATH, "200"] in first, first
    assert not [q for q in second if q[2] == WHEEL_PATH], f"the second install fetched the wheel upstream: {second}"
    assert cache_bytes(server, second_sb.id) >= len(tls_upstream["wheel"])


def test_curl_and_node_trust_the_node_ca(server, pip_image, sandboxes, tls_upstream):
    """curl (CURL_CA_BUNDLE, https_proxy) and Node.js (NODE_EXTRA_CA_CERTS, CONNECT by hand)
    fetch an npm tarball through the cache; the second fetch is a hit."""
    log = tls_upstream["log"]
    size = (tls_upstream["root"] / TARBALL_PATH.lstrip("/")).stat().st_size
    a = make(server, pip_image, sandboxes)
    mark = len(log.read_text().splitlines())
    # With the metadata npm sends on every request (`npm-auth-type` is no credential).
    r = a.run(f"curl -sS -H 'npm-auth-type: web' -H 'npm-command: install' -o /tmp/x.tgz https://npm.test{TARBALL_PATH}"
              " && stat -c %s /tmp/x.tgz", timeout=60)
    assert r.exit_code == 0 and r.stdout.strip() == str(size), r.raw
    assert ["npm.test", "GET", TARBALL_PATH, "200"] in requests_since(log, mark)
    b = make(server, pip_image, sandboxes, beside=a)
    assert b.node == a.node
    node = textwrap.dedent(f"""
        const http = require("http"), tls = require("tls");
        const proxy = new URL(process.env.https_proxy);
        http.request({{host: proxy.hostname, port: proxy.port, method: "CONNECT", path: "npm.test:443"}})
          .on("connect", (res, socket) => {{
            if (res.statusCode !== 200) {{ console.log("connect " + res.statusCode); process.exit(1); }}
            const t = tls.connect({{socket, servername: "npm.test"}}, () => {{
              t.write("GET {TARBALL_PATH} HTTP/1.1\\r\\nHost: npm.test\\r\\nConnection: close\\r\\n\\r\\n");
            }});
            let n = 0, head = "";
            t.on("data", d => {{ if (!head) head = d.toString("latin1").split("\\r\\n")[0]; n += d.length; }});
            t.on("end", () => {{ console.log(JSON.stringify({{head, n}})); }});
            t.on("error", e => {{ console.log("tls " + e.message); process.exit(1); }});
          }}).end();
        """)
    mark = len(log.read_text().splitlines())
    r = b.run(["node", "-e", node], timeout=60)
    assert r.exit_code == 0, r.raw
    out = json.loads(r.stdout)
    assert out["head"] == "HTTP/1.1 200 OK" and out["n"] > size, out
    assert not [q for q in requests_since(log, mark) if q[2] == TARBALL_PATH]
    assert cache_bytes(server, b.id) == size


def test_intercepted_hosts_get_the_node_ca_others_pass_through(server, pip_image, sandboxes, tls_upstream):
    sb = make(server, pip_image, sandboxes)
    out = json.loads(py(sb, """
        print(json.dumps({"intercepted": fetch("pypi.test"), "passthrough": fetch("passthrough.test", verify=False),
                          "env": {k: os.environ.get(k) for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT",
                                                                 "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")},
                          "ca": open("/etc/warren-egress-ca.pem").read(),
                          "bundle_roots": open("/etc/warren-ca-certificates.pem").read().count("BEGIN CERTIFICATE")}))
        """))
    i, p = out["intercepted"], out["passthrough"]
    assert i["issuer"] == "Warren egress proxy CA" and i["status"] == 200 and "hello over tls" in i["body"], i
    assert p["issuer"] == "warren e2e upstream CA" and p["status"] == 200, p  # the real server's own
    assert out["env"]["SSL_CERT_FILE"] == "/etc/warren-ca-certificates.pem"
    assert out["env"]["NODE_EXTRA_CA_CERTS"] == "/etc/warren-egress-ca.pem"
    assert out["ca"].startswith("-----BEGIN CERTIFICATE-----")
    assert out["bundle_roots"] > 50  # Debian's roots, and ours
    # The CA that sandboxes see is the one the node keeps, with name constraints.
    ca_file = Path(server.node_data_dir(sb.node)) / "egress-ca/ca.crt"
    assert ca_file.read_text() == out["ca"]
    text = _sh("openssl", "x509", "-in", str(ca_file), "-noout", "-text").stdout
    assert "Name Constraints: critical" in text and "DNS:pypi.test" in text, text
    # An exec's own variable wins.
    r = sb.run(["sh", "-c", "echo $SSL_CERT_FILE"], env={"SSL_CERT_FILE": "/mine.pem"})
    assert r.stdout.strip() == "/mine.pem"


def test_untrusted_upstream_is_refused_with_a_clear_error(server, pip_image, sandboxes, tls_upstream):
    sb = make(server, pip_image, sandboxes)
    out = json.loads(py(sb, 'print(json.dumps(fetch("untrusted.test")))'))
    assert out["connect"] == 502 and "certificate verify failed" in out["error"], out


def test_requests_inside_the_tunnel_stay_on_its_host(server, pip_image, sandboxes, tls_upstream):
    sb = make(server, pip_image, sandboxes, allow=["pypi.test:443/tcp"])
    out = json.loads(py(sb, """
        print(json.dumps({"other_host": fetch("pypi.test", host_header="files.test"),
                          "not_allowed": fetch("files.test")}))
        """))
    assert out["other_host"]["status"] == 400, out
    assert out["not_allowed"]["connect"] == 403, out


def test_sandboxes_without_egress_get_no_ca_variables(server, pip_image, sandboxes):
    sb = make(server, pip_image, sandboxes, mode="none")
    r = sb.run(["sh", "-c", "echo ${SSL_CERT_FILE:-unset}; test -e /etc/warren-egress-ca.pem && echo file || echo nofile"])
    assert r.stdout.split() == ["unset", "nofile"], r.raw
    # Switched to egress later: the files arrive, and the variables with the next exec.
    sb.set_network(["pypi.test:443/tcp"])
    r = sb.run(["sh", "-c", "echo ${SSL_CERT_FILE:-unset}; test -e /etc/warren-ca-certificates.pem && echo file"])
    assert r.stdout.split() == ["/etc/warren-ca-certificates.pem", "file"], r.raw
    out = json.loads(py(sb, 'print(json.dumps(fetch("pypi.test")))'))
    assert out["status"] == 200 and out["issuer"] == "Warren egress proxy CA", out


def test_an_image_without_roots_keeps_its_own_tls_settings(server, image, sandboxes, tls_upstream):
    """The busybox image has no root bundle: a bundle of the node CA alone would cut its tools
    off from every other host, so only NODE_EXTRA_CA_CERTS (which adds) is set."""
    sb = make(server, image, sandboxes)
    r = sb.run(["sh", "-c", "echo ${SSL_CERT_FILE:-unset} ${REQUESTS_CA_BUNDLE:-unset} $NODE_EXTRA_CA_CERTS; "
                            "head -c 27 /etc/warren-egress-ca.pem"])
    assert r.exit_code == 0, r.raw
    assert r.stdout.split("\n")[0].split() == ["unset", "unset", "/etc/warren-egress-ca.pem"], r.raw
    assert "-----BEGIN CERTIFICATE-----" in r.stdout


def test_cacheable_requests_with_other_credentials_are_not_stored(server, pip_image, sandboxes, tls_upstream):
    """A header that may carry a credential (here X-Api-Key) keeps the answer out of the
    cache: the same URL asked again, without it, goes upstream again."""
    log = tls_upstream["log"]
    path = "/packages/cred/secret-1.0.tar.gz"
    f = tls_upstream["root"] / path.lstrip("/")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(os.urandom(5000))
    sb = make(server, pip_image, sandboxes)
    mark = len(log.read_text().splitlines())
    for extra in ("-H 'X-Api-Key: k1'", ""):
        r = sb.run(f"curl -sS -o /dev/null -w '%{{http_code}}' {extra} https://files.test{path}", timeout=60)
        assert r.exit_code == 0 and r.stdout == "200", r.raw
    gets = [q for q in requests_since(log, mark) if q[2] == path]
    assert len(gets) == 2, gets
