#!/usr/bin/env python3
"""Layers on demand (chunked layers through blobfsd) against copying the whole layer first.

Two `warren serve`s on this machine, each with a layer store of its own served to its node over
HTTP by a store server that sleeps LATENCY per request: one publishes chunked layers (read on
demand), the other whole EROFS images (copied to the node before the first mount, one request).
The same image is built in both (a Debian rootfs with python3 and gcc: --tree DIR, or
--debian to build one with mmdebstrap).

For each latency and command, the time from create to the command's result and the bytes
fetched from the store:
  cold     the node's chunk cache (or whole-blob copy) empty, no prefetch trace
  cold+pf  cache empty, the layer's trace (recorded by the cold run) prefetched at open
  warm     everything cached on the node
(cold+pf and warm: medians of --repeat runs, 5 by default)
and the read throughput of a mounted layer (every file over 1 MiB under /usr/lib, page
cache dropped first) against a local EROFS image.

Targets (issue 26): at most 2% of the layer fetched before `python3 -c 'print(1)'` returns;
a cold start within 2x of a warm one.

  sudo python3 bench/lazy_layers.py --tree /path/to/rootfs [--latencies 0,1,5]
"""

import argparse
import http.server
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import BenchError, WarrenServe, log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARREN = os.environ.get("WARREN_BIN", os.path.join(ROOT, "build", "warren"))
IMAGE = "bench-lazy:1"
COMMANDS = ["python3 -c 'print(1)'", "python3 -c 'import json, sqlite3, email'", "gcc --version"]


class SlowStore(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a node fetches with 8 workers plus its readers at once

    def __init__(self, root):
        self.root, self.delay, self.bytes, self.meta_bytes, self.requests = root, 0.0, 0, 0, 0
        self.lock = threading.Lock()
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes: with Nagle on, the body waits for the
            # client's delayed ACK of the headers (up to 40 ms a request), which is this
            # server's cost, not the store's.
            disable_nagle_algorithm = True

            def log_message(self, *a):
                pass

            def do_GET(self):
                time.sleep(store.delay)
                path = re.sub(r"^blobs/sha256:", "blobs/sha256/", self.path.lstrip("/"))
                full = os.path.realpath(os.path.join(store.root, path))
                if not full.startswith(os.path.realpath(store.root) + "/") or not os.path.isfile(full):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with open(full, "rb") as f:
                    data = f.read()
                with store.lock:
                    store.requests += 1
                    store.bytes += len(data)
                    if not path.startswith(("chunks/", "packs/")):
                        store.meta_bytes += len(data)  # manifest, metadata image, trace
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Serve(WarrenServe):
    def __init__(self, scratch, fmt, extra=()):
        self.store_dir = tempfile.mkdtemp(prefix=f"warren-bench-{fmt}-store-", dir=scratch)
        self.store = SlowStore(self.store_dir)
        self.fmt = fmt
        try:
            super().__init__(WARREN, scratch, fmt,
                             ["--layer-store", self.store_dir, "--layer-store-url", self.store.url,
                              "--layer-format", fmt, *extra])
        except BenchError:
            self.store.shutdown()
            shutil.rmtree(self.store_dir, ignore_errors=True)
            raise

    def run(self, cmd):
        """Create, run `cmd`, delete: (seconds to the result, store bytes fetched, of which
        manifest, metadata and trace, store requests)."""
        before, meta_before, req_before = self.store.bytes, self.store.meta_bytes, self.store.requests
        t0 = time.monotonic()
        sid = self.http("POST", "/v1/sandboxes", {"image": IMAGE})["id"]
        e = self.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd})
        took = time.monotonic() - t0
        self.http("DELETE", f"/v1/sandboxes/{sid}")
        if e.get("exit_code") != 0:
            raise BenchError(f"{cmd}: {e}")
        return (took, self.store.bytes - before, self.store.meta_bytes - meta_before,
                self.store.requests - req_before)

    def digest(self):
        return self.http("GET", "/v1/layers/" + IMAGE)["digest"]

    def forget(self, keep_trace=False):
        """A cold node: nothing of the layer cached (chunks, or the whole blob)."""
        hexd = self.digest().split(":")[1]
        if self.fmt == "whole":
            try:
                os.unlink(os.path.join(self.data, "blobs", "sha256", hexd))
            except FileNotFoundError:
                pass  # not fetched yet
            return
        pid = int(open(os.path.join(self.data, "blobfs", "pid")).read())
        # Nothing of the layer: chunks, and the manifest and metadata image a create fetches
        # before anything else.
        for sub in ("chunks", "meta", "promoted"):
            shutil.rmtree(os.path.join(self.data, sub), ignore_errors=True)
        try:
            os.unlink(os.path.join(self.data, "blobs", "sha256", hexd))
        except FileNotFoundError:
            pass
        if not keep_trace:
            shutil.rmtree(os.path.join(self.data, "traces"), ignore_errors=True)
            for sub in ("traces", "packs"):
                shutil.rmtree(os.path.join(self.store_dir, sub), ignore_errors=True)
        os.kill(pid, signal.SIGKILL)  # this benchmark's serve started it
        for _ in range(300):
            try:
                if int(open(os.path.join(self.data, "blobfs", "pid")).read()) != pid and \
                        self.node().get("daemon_pid") not in (None, pid):
                    time.sleep(1)  # the node has seen the restart and remounted: settled
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise BenchError("blobfsd was not restarted")

    def node(self):
        return self.http("GET", "/v1/nodes")["nodes"][0].get("layers_on_demand", {})

    def layer_stats(self):
        layers = self.node().get("layers", [])
        return layers[0] if layers else {}

    def traced(self):
        return any(l.get("traced") for l in self.node().get("layers", []))

    def stop(self):
        self.delete_all()
        super().stop()
        self.store.shutdown()
        shutil.rmtree(self.store_dir, ignore_errors=True)


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", help="rootfs directory to build the image from")
    ap.add_argument("--debian", action="store_true", help="build bookworm + python3,gcc (network)")
    ap.add_argument("--latencies", default="0,1,5", help="store latency per request, ms")
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--commands", default="0,1,2", help="which of the commands to run (indexes)")
    ap.add_argument("--no-read", action="store_true", help="skip the read throughput part")
    ap.add_argument("--repeat", type=int, default=5,
                    help="cold+prefetch and warm runs per row (their medians are shown)")
    ap.add_argument("--layer-readahead", type=int,
                    help="KiB of readahead on lazy mounts (warren's --layer-readahead; default: its own)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise BenchError("run as root (warren serve)")
    if not a.tree and not a.debian:
        raise BenchError("give --tree DIR or --debian")
    extra = [] if a.layer_readahead is None else ["--layer-readahead", str(a.layer_readahead)]
    lazy, whole = Serve(a.scratch, "chunked", extra), Serve(a.scratch, "whole")
    try:
        for s in (lazy, whole):
            if a.tree:
                s.cli("image", "build", IMAGE, "--from-dir", a.tree)
            else:
                s.cli("image", "build", IMAGE, "--debian", "bookworm", "--packages", "python3,gcc")
        layer = lazy.http("GET", "/v1/layers/" + IMAGE)
        total = layer["chunk_bytes"] + layer["meta_bytes"]
        log(f"image: {layer['chunks']} chunks, {layer['chunk_bytes'] >> 20} MiB of data, "
            f"metadata {layer['meta_bytes'] >> 10} KiB ({layer['meta_bytes'] / total:.2%})")
        # A first sandbox on each serve pays one-time costs (cgroup parents, the first mount)
        # that are not the layer's.
        lazy.run("true")
        whole.run("true")
        rows = []
        for ms in [float(x) for x in a.latencies.split(",")]:
            lazy.store.delay = whole.store.delay = ms / 1000
            for cmd in [COMMANDS[int(i)] for i in a.commands.split(",")]:
                lazy.forget()
                cold, cold_b, cold_m, cold_r = lazy.run(cmd)
                # The cold run recorded a trace; it is saved, with its pack, when its window
                # (20 s) ends.
                pack = os.path.join(lazy.store_dir, "packs", "sha256", lazy.digest().split(":")[1])
                for _ in range(300):
                    if lazy.traced() and os.path.exists(pack):
                        break
                    time.sleep(0.1)
                # Medians of --repeat runs: one run of a 0.2 s start is noise on 2 cores.
                pfs, warms = [], []
                for _ in range(a.repeat):
                    lazy.forget(keep_trace=True)
                    pfs.append(lazy.run(cmd))
                    warms.append(lazy.run(cmd)[0])
                pf, pf_b, _, pf_r = sorted(pfs)[len(pfs) // 2]
                warm = statistics.median(warms)
                whole.forget()
                wcold, wcold_b, _, _ = whole.run(cmd)
                wwarm = whole.run(cmd)[0]
                rows.append((ms, cmd, cold, cold_b, cold_m, cold_r, pf, pf_b, pf_r, warm, wcold,
                             wcold_b, wwarm))
                log(f"{ms:g} ms {cmd}: cold {cold:.2f} s {cold_b >> 20} MiB {cold_r} requests, "
                    f"cold+pf {pf:.2f} s {pf_r} requests, "
                    f"warm {warm:.2f} s | whole: cold {wcold:.2f} s {wcold_b >> 20} MiB, warm {wwarm:.2f} s")
        lt = wt = nbytes = 0
        if not a.no_read:
            # Throughput of a mounted layer against a local EROFS image, page cache dropped.
            lazy.store.delay = whole.store.delay = 0
            read = "find /usr/lib -type f -size +1M -exec cat {} + | wc -c"
            lazy.run(read)  # everything cached on the node
            drop_caches()
            lt = lazy.run(read)[0]
            whole.run(read)
            drop_caches()
            wt = whole.run(read)[0]
            sid = lazy.http("POST", "/v1/sandboxes", {"image": IMAGE})["id"]
            nbytes = int(lazy.http("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": read})["stdout"])
            lazy.http("DELETE", f"/v1/sandboxes/{sid}")
        print(f"\nimage {IMAGE}: {total >> 20} MiB ({layer['chunks']} chunks of up to "
              f"{layer.get('chunk_size', 0) >> 10} KiB; metadata {layer['meta_bytes'] >> 10} KiB)\n")
        print("| latency | command | cold | fetched (of which manifest + metadata; requests) "
              "| cold+prefetch | fetched (requests) | warm | cold/warm | cold+prefetch/warm "
              "| whole copy + run | whole warm |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for (ms, cmd, cold, cold_b, cold_m, cold_r, pf, pf_b, pf_r, warm, wcold, wcold_b,
             wwarm) in rows:
            print(f"| {ms:g} ms | `{cmd}` | {cold:.2f} s | {cold_b / 2**20:.1f} MiB "
                  f"({cold_b / total:.1%}; {cold_m / 2**20:.1f} MiB; {cold_r}) | {pf:.2f} s "
                  f"| {pf_b / 2**20:.1f} MiB ({pf_r}) | {warm:.2f} s | {cold / warm:.1f}x "
                  f"| {pf / warm:.1f}x "
                  f"| {wcold:.2f} s ({wcold_b >> 20} MiB) | {wwarm:.2f} s |")
        if nbytes:
            print(f"\nread {nbytes >> 20} MiB (files over 1 MiB under /usr/lib), page cache dropped: "
                  f"mounted chunked layer {nbytes / lt / 2**20:.0f} MiB/s, local EROFS image "
                  f"{nbytes / wt / 2**20:.0f} MiB/s (including create and delete)")
    finally:
        lazy.stop()
        whole.stop()


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        sys.exit(1)
