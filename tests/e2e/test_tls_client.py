"""`WARREN_URL=https://...`: the CLI and the SDK talk to a server behind a TLS terminator (as a
production deployment puts it), verify its certificate against the trusted roots (here the
test CA through SSL_CERT_FILE) and refuse one they cannot verify.

The terminator is a few lines of Python `ssl` on loopback that forwards bytes to the test
server's plain port; its certificate is for 127.0.0.1 and `localhost`, from a CA the test makes.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading

import pytest

from conftest import make_test_ca, make_test_leaf


class _Terminator:
    """TLS on a loopback port, plain TCP to the server: one thread pair per connection."""

    def __init__(self, crt: str, key: str, upstream_port: int, host: str = "127.0.0.1"):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(crt, key)
        self.upstream = upstream_port
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw):
        try:
            tls = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()  # a client that refused our certificate
            return
        up = socket.create_connection(("127.0.0.1", self.upstream))

        def pump(src, dst):
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        threading.Thread(target=pump, args=(up, tls), daemon=True).start()
        pump(tls, up)

    def close(self):
        self.stopped = True
        self.sock.close()


@pytest.fixture(scope="module")
def tls_front(server, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tls-front"))
    ca = make_test_ca(d)
    crt, key = make_test_leaf(d, "front", ["IP:127.0.0.1", "DNS:localhost"], ca)
    # A certificate from a CA nobody trusts, and the good one on an address it does not name.
    rogue_dir = os.path.join(d, "rogue")
    os.makedirs(rogue_dir)
    rcrt, rkey = make_test_leaf(rogue_dir, "rogue", ["IP:127.0.0.1", "DNS:localhost"], make_test_ca(rogue_dir))
    fronts = {"good": _Terminator(crt, key, server.port), "rogue": _Terminator(rcrt, rkey, server.port),
              "misnamed": _Terminator(crt, key, server.port, host="127.0.0.2")}
    yield {"ca": ca["crt"], **{k: t.port for k, t in fronts.items()}}
    for t in fronts.values():
        t.close()


def test_cli_over_https(server, image, tls_front):
    env = {"WARREN_URL": f"https://127.0.0.1:{tls_front['good']}", "SSL_CERT_FILE": tls_front["ca"]}
    r = server.cli("run", "--image", image, "--", "echo", "over tls", env=env)
    assert r.returncode == 0 and r.stdout == "over tls\n", r
    # A DNS name is checked against the certificate too (and sent as SNI).
    env["WARREN_URL"] = f"https://localhost:{tls_front['good']}"
    r = server.cli("ls", "--json", env=env)
    assert r.returncode == 0, r


def test_cli_refuses_a_certificate_it_cannot_verify(server, tls_front):
    # Signed by a CA that is not trusted.
    env = {"WARREN_URL": f"https://127.0.0.1:{tls_front['rogue']}", "SSL_CERT_FILE": tls_front["ca"]}
    r = server.cli("ls", env=env)
    assert r.returncode != 0
    assert "TLS handshake" in r.stderr and "certificate" in r.stderr, r.stderr
    # Trusted, but for another name.
    env = {"WARREN_URL": f"https://127.0.0.2:{tls_front['misnamed']}", "SSL_CERT_FILE": tls_front["ca"]}
    r = server.cli("ls", env=env)
    assert r.returncode != 0 and "TLS handshake" in r.stderr, r.stderr


def test_cli_names_an_unsupported_scheme(server):
    r = server.cli("ls", env={"WARREN_URL": "ftp://127.0.0.1:1"})
    assert r.returncode != 0 and "only http:// and https://" in r.stderr, r.stderr


def test_sdk_over_https(server, image, tls_front, monkeypatch):
    import warren

    monkeypatch.setenv("SSL_CERT_FILE", tls_front["ca"])
    c = warren.Client(url=f"https://127.0.0.1:{tls_front['good']}", token=server.token)
    sb = c.create(image=image)
    try:
        assert sb.run(["echo", "sdk tls"]).stdout == "sdk tls\n"
    finally:
        sb.delete()
