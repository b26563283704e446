"""HTTPS test hosts for the package-cache tests, run inside a network namespace the test made
(never anything outside this machine): net_upstream.py's directory handler on port 443 of
each ADDR with that address's certificate, every request logged as `HOST METHOD PATH STATUS`.

usage: tls_upstream.py DIR LOG ADDR:CERT:KEY..."""

import ssl
import sys

from net_upstream import Handler, HTTPServer, serve

Handler.root, Handler.log_path, Handler.log_host = sys.argv[1], sys.argv[2], True
servers = []
for spec in sys.argv[3:]:
    addr, cert, key = spec.split(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    s = HTTPServer((addr, 443), Handler)
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
    servers.append(s)
serve(servers)
