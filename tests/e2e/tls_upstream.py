"""HTTPS test hosts for the package-cache tests, run inside a network namespace the test made
(never anything outside this machine): a directory served over HTTPS on port 443 of each
ADDR with that address's certificate, every request logged as `HOST METHOD PATH STATUS`.

usage: tls_upstream.py DIR LOG ADDR:CERT:KEY..."""

import http.server
import socketserver
import ssl
import sys
import threading

root, log_path, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
log_lock = threading.Lock()


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def __init__(self, *a, **kw):
        super().__init__(*a, directory=root, **kw)

    def log_request(self, code="-", size="-"):
        host = (self.headers.get("Host") or "-") if self.headers else "-"
        with log_lock, open(log_path, "a") as f:
            f.write(f"{host} {self.command} {self.path} {int(code) if str(code).isdigit() else code}\n")

    def log_message(self, *a):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):  # no reverse lookup of our name (there is no DNS here)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "upstream", self.server_address[1]


servers = []
for spec in specs:
    addr, cert, key = spec.split(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    s = Server((addr, 443), Handler)
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
    servers.append(s)
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
servers[0].serve_forever()
