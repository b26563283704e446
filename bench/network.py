#!/usr/bin/python3
"""Sandbox networking benchmark (issue 7): what a sandbox's network costs, and the proxy.

  setup     the node's network attach per sandbox (namespace, and for egress a veth with an
            address and its firewall chain), as the node measures it, with the namespace pool
            (`--net-pool 8`) and without it (`--net-pool 0`), against doing the same by hand
            with iproute2 (`ip netns add` + `ip link add veth ... netns` + address + up), and
            create -> first exec latency through the API for none and egress sandboxes.
  parallel  POST /v1/sandboxes:batch of 100 egress sandboxes (and 100 none ones) with 4
            clients in parallel: wall time.
  proxy     a 100 MB file from a test host, downloaded inside a sandbox with busybox wget
            through the egress proxy: first (upstream, cache miss) and then from the cache,
            against the same download direct (allowed by an address rule, through NAT) and
            from the host itself without any sandbox.
  https     the same file over HTTPS from an intercepted host (`--proxy-intercept`), with
            curl in a Debian sandbox (mmdebstrap: needs the Debian archive): miss, then from
            the cache through the node CA's TLS, against curl direct over TLS through NAT and
            host curl over TLS. The test host's TLS server is Python's (ssl module).

The test host is a network namespace the benchmark makes (10.252.0.2), nothing else is
contacted. Starts its own `warren serve` (build/warren) with scratch state under /var/tmp.
Root, Debian's /usr/bin/python3, standard library only.

  sudo /usr/bin/python3 bench/network.py [--json out.json]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BenchError  # noqa: E402
from service import Api, log, pct, start_server, REPO  # noqa: E402

UP = "10.252.0"
NS = f"wbench-up-{os.getpid()}"
VETH = f"wbu{os.getpid() % 100000}"
SUBNET = "10.86.0.0/16"


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def make_upstream(www):
    with open(os.path.join(www, "big.deb"), "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(100):
            f.write(chunk)
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS)
    sh("ip", "addr", "add", f"{UP}.1/24", "dev", VETH)
    sh("ip", "link", "set", VETH, "up")
    sh("ip", "-n", NS, "addr", "add", f"{UP}.2/24", "dev", "eth0")
    sh("ip", "-n", NS, "link", "set", "eth0", "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    sh("ip", "-n", NS, "route", "add", "default", "via", f"{UP}.1")
    proc = subprocess.Popen(["ip", "netns", "exec", NS, "busybox", "httpd", "-f", "-p", "80", "-h", www],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # HTTPS: a test CA (the server's --proxy-upstream-ca) and a certificate for big.bench.
    ca_key, ca, key, csr, crt, ext = (os.path.join(www, "..", n) for n in ("ca.key", "ca.crt", "tls.key", "tls.csr",
                                                                           "tls.crt", "tls.ext"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    sh("openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", "/CN=bench CA")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:big.bench\n")
    sh("openssl", "req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=big.bench")
    sh("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", crt, "-days", "1",
       "-extfile", ext)
    tls = subprocess.Popen(["ip", "netns", "exec", NS, "/usr/bin/python3", "-c", TLS_SERVER, www, crt, key],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    tls.stdout.readline()
    proc.tls, proc.ca = tls, os.path.abspath(ca)
    for _ in range(50):
        if sh("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://{UP}.2/big.deb", "-r", "0-0",
              check=False).stdout == "206":
            break
        time.sleep(0.1)
    return proc


TLS_SERVER = """
import functools, http.server, ssl, sys
www, crt, key = sys.argv[1:]
srv = http.server.ThreadingHTTPServer(("0.0.0.0", 443), functools.partial(http.server.SimpleHTTPRequestHandler,
                                                                          directory=www))
srv.RequestHandlerClass.log_message = lambda *a: None
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(crt, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
"""


def drop_upstream(proc):
    if proc:
        proc.kill()
        proc.wait()
        if getattr(proc, "tls", None):
            proc.tls.kill()
            proc.tls.wait()
    sh("ip", "link", "del", VETH, check=False)
    sh("ip", "netns", "del", NS, check=False)


def by_hand(n):
    """What an operator would do without a pool: iproute2, one netns and veth per sandbox."""
    samples = []
    for i in range(n):
        ns, v = f"wbh{os.getpid()}-{i}", f"wbh{i}"
        t0 = time.perf_counter()
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", ns, "addr", "add", f"10.253.{i // 250}.{i % 250 + 2}/32", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "set", v, "up")
        samples.append(time.perf_counter() - t0)
        sh("ip", "netns", "del", ns)
    return samples


def node_net(api):
    return api.call("GET", "/v1/nodes")["nodes"][0]["network"]


def create_exec(api, image, network, n):
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        sb = api.call("POST", "/v1/sandboxes", {"image": image, "network": network})
        r = api.call("POST", f"/v1/sandboxes/{sb['id']}/exec", {"argv": ["true"]})
        samples.append(time.perf_counter() - t0)
        assert r["exit_code"] == 0, r
        api.call("DELETE", f"/v1/sandboxes/{sb['id']}")
    return samples


def serve(tmp, pool, hosts, upstream_ca, extra=()):
    return start_server(tmp, ["--net-subnet", SUBNET, "--net-pool", str(pool), "--dns-hosts", hosts,
                              "--proxy-intercept", "big.bench", "--proxy-upstream-ca", upstream_ca, *extra])


def ipv6_ab(tmp, hosts, upstream_ca, n, rounds):
    """What sandbox IPv6 costs on the egress path: `warren serve` with it (the default) and
    with `--no-net-ipv6`, in alternating rounds so that the host's drift falls on both. No
    pool (`--net-pool 0`): every attach makes its namespace, veth, addresses and routes on the
    create path, and the firewall loads the chain with its sets of both families."""
    out = {"ipv6": [], "ipv4_only": []}
    for r in range(rounds):
        for label, extra in (("ipv6", ()), ("ipv4_only", ("--no-net-ipv6",))):
            d = os.path.join(tmp, f"ab-{label}-{r}")
            os.makedirs(d)
            proc, port, token = serve(d, 0, hosts, upstream_ca, extra)
            try:
                api = Api(port, token)
                img = image(port, token, d)
                if node_net(api)["ipv6"] != (label == "ipv6"):
                    raise BenchError(f"{label}: the node says ipv6={node_net(api)['ipv6']}")
                lat = create_exec(api, img, {"mode": "egress", "allow": ["big.bench"]}, n)
                pool = node_net(api)["pool"]
                row = {"attach_us_miss": pool["attach_us_miss"],
                       "create_exec_p50_ms": pct([x * 1000 for x in lat], 50)}
                out[label].append(row)
                log(f"round {r} {label}: {row}")
            finally:
                stop(proc)
    for label in ("ipv6", "ipv4_only"):
        rows = out[label]
        out[label + "_median"] = {k: statistics.median(x[k] for x in rows) for k in rows[0]}
    return out


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)


def image(api_port, token, tmp):
    root = os.path.join(tmp, "rootfs")
    sh(os.path.join(REPO, "scripts", "make-busybox-rootfs.sh"), root)
    env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{api_port}", WARREN_TOKEN=token)
    subprocess.run([os.path.join(REPO, "build", "warren"), "image", "build", "bench:1", "--from-dir", root],
                   check=True, env=env, capture_output=True)
    return "bench:1"


def wget(api, sid, url, direct=False):
    cmd = f"wget -q -O /dev/null {url}"
    if direct:
        cmd = "unset http_proxy HTTP_PROXY; " + cmd
    t0 = time.perf_counter()
    r = api.call("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", cmd], "timeout_s": 300})
    dt = time.perf_counter() - t0
    assert r["exit_code"] == 0, r
    return dt


def http_throughput(api, img):
    """100 MB over plain HTTP: busybox wget in a sandbox, through the proxy and direct."""
    sb = api.call("POST", "/v1/sandboxes", {"image": img, "network": {"mode": "egress",
                                                                    "allow": ["big.bench", f"{UP}.2/32"]}})
    url = "http://big.bench/big.deb"
    miss = wget(api, sb["id"], url)
    hits = [wget(api, sb["id"], url) for _ in range(3)]
    direct = [wget(api, sb["id"], url, direct=True) for _ in range(3)]
    t0 = time.perf_counter()
    sh("curl", "-s", "-o", "/dev/null", f"http://{UP}.2/big.deb")
    host = time.perf_counter() - t0
    api.call("DELETE", f"/v1/sandboxes/{sb['id']}")
    return rates("100 MB", miss, hits, direct, host)


def rates(label, miss, hits, direct, host):
    """MB/s of 100 MB downloads: the miss, the best hit and direct run, the host's."""
    mb = 100 * 1.048576
    res = {"miss": mb / miss, "cache_hit": mb / min(hits), "direct_nat": mb / min(direct), "host_curl": mb / host}
    log(f"{label}: proxy miss {res['miss']:.0f} MB/s, cache hit {res['cache_hit']:.0f} MB/s, "
        f"direct {res['direct_nat']:.0f} MB/s, host curl {res['host_curl']:.0f} MB/s")
    return res


def https_throughput(api, port, token, ca):
    """100 MB over HTTPS from the intercepted big.bench: curl in a Debian sandbox."""
    env = dict(os.environ, WARREN_URL=f"http://127.0.0.1:{port}", WARREN_TOKEN=token)
    subprocess.run([os.path.join(REPO, "build", "warren"), "image", "build", "bench-curl:1", "--debian", "bookworm",
                    "--packages", "curl,ca-certificates"], check=True, env=env, capture_output=True, timeout=900)
    sb = api.call("POST", "/v1/sandboxes", {"image": "bench-curl:1",
                                            "network": {"mode": "egress", "allow": ["big.bench", f"{UP}.2/32"]}})

    def curl(extra=""):
        t0 = time.perf_counter()
        r = api.call("POST", f"/v1/sandboxes/{sb['id']}/exec",
                     {"cmd": f"curl -sS -o /dev/null {extra} https://big.bench/big.deb", "timeout_s": 300})
        assert r["exit_code"] == 0, r
        return time.perf_counter() - t0
    miss = curl()
    hits = [curl() for _ in range(3)]
    direct = [curl("--noproxy big.bench -k") for _ in range(3)]  # the test CA is not in the sandbox
    t0 = time.perf_counter()
    sh("curl", "-s", "-o", "/dev/null", "--cacert", ca, "--resolve", f"big.bench:443:{UP}.2", "https://big.bench/big.deb")
    host = time.perf_counter() - t0
    api.call("DELETE", f"/v1/sandboxes/{sb['id']}")
    return rates("100 MB over HTTPS", miss, hits, direct, host)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--json")
    ap.add_argument("--sections", default="setup,parallel,proxy,https,ipv6",
                    help="comma-separated: setup (with the pool and without), parallel, proxy, https, "
                         "ipv6 (an A/B against --no-net-ipv6)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the ipv6 A/B")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/network.py must run as root")
    out = {}
    tmp = tempfile.mkdtemp(prefix="warren-bench-net-", dir="/var/tmp")
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    hosts = os.path.join(tmp, "hosts")
    with open(hosts, "w") as f:
        f.write(f"{UP}.2 big.bench\n")
    upstream = proc = None
    try:
        upstream = make_upstream(www)
        n = args.iterations
        sections = set(args.sections.split(","))
        if "setup" in sections:
            log(f"setup by hand (iproute2), {n}x")
            hand = by_hand(n)
            out["setup_by_hand_ms"] = {"p50": pct([x * 1000 for x in hand], 50)}

        for pool in ((8, 0) if "setup" in sections else (8,)):
            d = os.path.join(tmp, f"pool{pool}")
            os.makedirs(d)
            proc, port, token = serve(d, pool, hosts, upstream.ca)
            api = Api(port, token)
            img = image(port, token, d)
            time.sleep(1)  # the pool fills
            res = {}
            for label, network in (("none", {"mode": "none"}), ("egress", {"mode": "egress", "allow": ["big.bench"]})):
                if "setup" not in sections:
                    break
                before = node_net(api)["pool"]
                lat = create_exec(api, img, network, n)
                time.sleep(0.5)
                after = node_net(api)["pool"]
                res[label] = {"create_exec_p50_ms": pct([x * 1000 for x in lat], 50),
                              "attach_us_hit": after["attach_us_hit"], "attach_us_miss": after["attach_us_miss"],
                              "hits": after["hits"] - before["hits"], "misses": after["misses"] - before["misses"]}
                log(f"pool {pool} {label}: {res[label]}")
            if res:
                out[f"pool_{pool}"] = res
            if pool == 8:
                # parallel batches of 100
                for label, network in (("none", {"mode": "none"}), ("egress", {"mode": "egress", "allow": ["big.bench"]})):
                    if "parallel" not in sections:
                        break
                    t0 = time.perf_counter()
                    results = []

                    def batch():
                        a = Api(port, token)
                        results.append(a.call("POST", "/v1/sandboxes:batch",
                                              {"count": 25, "spec": {"image": img, "network": network}}))
                    ts = [threading.Thread(target=batch) for _ in range(4)]
                    [t.start() for t in ts]
                    [t.join() for t in ts]
                    wall = time.perf_counter() - t0
                    made = [s["id"] for r in results for s in r["sandboxes"]]
                    errors = sum(len(r["errors"]) for r in results)
                    out[f"parallel_100_{label}_s"] = wall
                    log(f"parallel create of 100 ({label}): {wall:.2f} s, {errors} errors")
                    for sid in made:
                        api.call("DELETE", f"/v1/sandboxes/{sid}")
                if "proxy" in sections:
                    out["proxy_MBps"] = http_throughput(api, img)
                if "https" in sections:
                    out["proxy_https_MBps"] = https_throughput(api, port, token, upstream.ca)
            stop(proc)
            proc = None
        if "ipv6" in sections:
            out["ipv6_ab"] = ipv6_ab(tmp, hosts, upstream.ca, n, args.rounds)
    finally:
        if proc:
            stop(proc)
        drop_upstream(upstream)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
