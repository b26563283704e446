"""Test hosts for the network tests, run inside a network namespace the test made (never
anything outside this machine): an HTTP server over a directory that logs every request with
its status, a TCP echo server and a UDP echo server, on every address of the namespace, IPv4
and IPv6.
tls_upstream.py serves the same directory handler over HTTPS.

usage: net_upstream.py DIR LOG HTTP_PORT ECHO_PORT"""

import http.server
import socket
import socketserver
import sys
import threading


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves `root`; logs `METHOD PATH STATUS` lines (with the Host header first when
    `log_host`) to `log_path`."""
    protocol_version = "HTTP/1.1"
    root = log_path = ""
    log_host = False
    log_lock = threading.Lock()

    def __init__(self, *a, **kw):
        super().__init__(*a, directory=self.root, **kw)

    def log_request(self, code="-", size="-"):
        line = f"{self.command} {self.path} {int(code) if str(code).isdigit() else code}\n"
        if self.log_host:
            line = ((self.headers.get("Host") if self.headers else None) or "-") + " " + line
        with self.log_lock, open(self.log_path, "a") as f:
            f.write(line)

    def log_message(self, *a):
        pass


class HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):  # no reverse lookup of our name (there is no DNS here)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "upstream", self.server_address[1]


class V6Only:
    """A server on the namespace's IPv6 addresses only (IPv4 has its own)."""
    address_family = socket.AF_INET6

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


class HTTPServer6(V6Only, HTTPServer):
    pass


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


class EchoServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class UdpEcho(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(data, self.client_address)


class EchoServer6(V6Only, EchoServer):
    pass


class UdpEchoServer6(V6Only, socketserver.ThreadingUDPServer):
    pass


def serve(servers):
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    servers[0].serve_forever()


if __name__ == "__main__":
    Handler.root, Handler.log_path, http_port, echo_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    serve([HTTPServer(("0.0.0.0", http_port), Handler), EchoServer(("0.0.0.0", echo_port), Echo),
           socketserver.ThreadingUDPServer(("0.0.0.0", echo_port), UdpEcho),
           HTTPServer6(("::", http_port), Handler), EchoServer6(("::", echo_port), Echo),
           UdpEchoServer6(("::", echo_port), UdpEcho)])
