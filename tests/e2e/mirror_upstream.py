"""The package registries of the package-mirror tests, run inside a network namespace the test
made (never anything outside this machine): one directory served over HTTPS on port 443 (npm
and PyPI) and plain HTTP on port 80 (apt) of ADDR, every request logged as
`HOST METHOD PATH STATUS`. An npm packument is the file `packument.json` in the package's
directory, so /NAME is the packument and /NAME/-/NAME-1.0.0.tgz a tarball, as on npm's
registry.

Each body's size is appended to LOG.bytes as `PATH BYTES` (what the registry sent).

usage: mirror_upstream.py DIR LOG ADDR CERT KEY   (CERT `-`: plain HTTP only)"""

import os
import ssl
import sys
import time

from net_upstream import Handler, HTTPServer, serve


class RegistryHandler(Handler):
    def copyfile(self, source, outputfile):
        sent = 0
        while True:
            data = source.read(65536)
            if not data:
                break
            outputfile.write(data)
            sent += len(data)
        with self.log_lock, open(self.log_path + ".bytes", "a") as f:
            f.write(f"{self.path} {sent}\n")

    def send_head(self):
        # A slow registry: answers under /slow/ start after a pause, so that concurrent
        # requests for them overlap (the collapsed-fetch test).
        if self.path.startswith("/slow/"):
            time.sleep(1.5)
        return super().send_head()

    def translate_path(self, path):
        p = super().translate_path(path)
        packument = os.path.join(p, "packument.json")
        if os.path.isdir(p) and not path.split("?")[0].endswith("/") and os.path.isfile(packument):
            return packument
        return p


if __name__ == "__main__":
    root, log, addr, cert, key = sys.argv[1:6]
    RegistryHandler.root, RegistryHandler.log_path, RegistryHandler.log_host = root, log, True
    servers = [HTTPServer((addr, 80), RegistryHandler)]
    if cert != "-":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        https = HTTPServer((addr, 443), RegistryHandler)
        https.socket = ctx.wrap_socket(https.socket, server_side=True)
        servers.insert(0, https)
    serve(servers)
