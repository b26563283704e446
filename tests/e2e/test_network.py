"""Sandbox networking: default deny, allowlists by name and address, the node's DNS resolver,
the egress proxy and its package cache, policy changes while a sandbox runs, and the tricks a
root occupant tries. The only hosts reached are in a network namespace this module makes
(conftest.NET_HOSTS names them for the server); nothing leaves this machine."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import signal
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import conftest
import e2e_util
import package_registries
from conftest import NET_UPSTREAM, NET_UPSTREAM6

UP2, UP3 = f"{NET_UPSTREAM}.2", f"{NET_UPSTREAM}.3"
UP6 = f"{NET_UPSTREAM6}::2"  # v6.test
HTTP_PORT, ECHO_PORT = 80, 9007
HERE = Path(__file__).resolve().parent


def _sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """The test hosts: a namespace with UP2 and UP3, an HTTP server (a directory that also
    holds a Debian repository), TCP and UDP echo; routed from the host through a veth."""
    ns, veth = f"wt-up-{os.getpid()}", f"wtu{os.getpid() % 100000}"
    root = tmp_path_factory.mktemp("upstream-www")
    log = root.parent / "upstream-requests.log"
    log.write_text("")
    # A real Debian repository: what apt-get fetches in the package-cache tests.
    package_registries.apt_repo(root, "warren", "debian", says="hello from a cached package")
    (root / "hello.txt").write_text("hello from upstream\n")
    with open(root / "big.bin", "wb") as f:
        f.write(os.urandom(1 << 20) * 8)
    proc = None
    try:
        proc = e2e_util.start_test_hosts(ns, veth, NET_UPSTREAM, (UP2, UP3), [
            "/usr/bin/python3", str(HERE / "net_upstream.py"), str(root), str(log), str(HTTP_PORT), str(ECHO_PORT)],
            prefix6=NET_UPSTREAM6, ips6=(UP6,))
        yield {"root": root, "log": log, "ns": ns}
    finally:
        e2e_util.stop_test_hosts(proc, ns, veth)


def make(server, runner, sandboxes, allow=None, mode=None, beside=None):
    """A sandbox; `beside`: on the node another one runs on (a node keeps its own package
    cache, so a hit needs the same node; on `warren serve` there is only the one)."""
    spec = {"image": runner}
    if allow is not None or mode is not None:
        spec["network"] = {"mode": mode or "egress", "allow": list(allow or [])}
    if beside is not None:
        spec["node_selector"] = {"warren.node": beside.node}
    sb = server.client().create(spec)
    sandboxes.append(sb.id)
    return sb


def py(sb, code: str, timeout: int = 60, env=None):
    return sb.run(["python3", "-c", textwrap.dedent(code)], timeout=timeout, env=env)


PROBE = """
import errno, json, socket, sys, time
def tcp(host, port, t=4, family=socket.AF_INET):
    s = socket.socket(family); s.settimeout(t); t0 = time.time()
    try:
        s.connect((host, port)); s.sendall(b"ping"); d = s.recv(16); s.close()
        return "ok:" + d.decode(errors="replace")
    except Exception as e:
        return f"{type(e).__name__}:{getattr(e, 'errno', '')}:{time.time() - t0:.2f}"
def udp(host, port, t=2, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_DGRAM); s.settimeout(t)
    try:
        s.sendto(b"ping", (host, port)); return "ok:" + s.recv(16).decode()
    except Exception as e:
        return f"{type(e).__name__}:{getattr(e, 'errno', '')}"
def name(n):
    try: return socket.gethostbyname(n)
    except Exception as e: return f"{type(e).__name__}"
"""


def probe(sb, body: str, env=None):
    r = py(sb, PROBE + textwrap.dedent(body), env=env)
    assert r.exit_code == 0, r.raw
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_default_is_no_network(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes)
    assert sb.network["mode"] == "none"
    out = probe(sb, f"""
        print(json.dumps({{"tcp": tcp("{UP2}", {ECHO_PORT}), "name": name("pkg.test"),
                          "udp": udp("{UP2}", {ECHO_PORT})}}))""")
    assert out["tcp"].startswith("OSError:101:"), out  # Network is unreachable, at once
    assert float(out["tcp"].split(":")[2]) < 1.0
    assert not out["name"][0].isdigit(), out
    assert not out["udp"].startswith("ok"), out
    r = sb.run("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 80)); s.listen(); print(\"lo ok\")'")
    assert r.stdout.strip() == "lo ok", r.raw  # loopback works, and root may bind low ports


def test_allowlist_by_name_and_address(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes, allow=[f"pkg.test:{ECHO_PORT}/tcp", f"{UP3}/32:{ECHO_PORT}/tcp"])
    out = probe(sb, f"""
        print(json.dumps({{
            "by_name": tcp("pkg.test", {ECHO_PORT}), "resolved": name("pkg.test"),
            "not_allowed_name": name("other.test"), "unknown_name": name("exfil-data.evil.test"),
            "by_ip_of_allowed_name": tcp("{UP2}", {ECHO_PORT}),
            "other_port": tcp("{UP2}", {HTTP_PORT}), "other_port_of_cidr": tcp("{UP3}", {HTTP_PORT}),
            "cidr_rule": tcp("{UP3}", {ECHO_PORT}),
            "udp_not_allowed": udp("{UP2}", {ECHO_PORT}),
        }}))""")
    assert out["by_name"] == "ok:ping", out
    assert out["resolved"] == UP2
    assert out["not_allowed_name"] == "gaierror" and out["unknown_name"] == "gaierror", out
    assert out["by_ip_of_allowed_name"] == "ok:ping", out  # the resolved address is open now
    assert out["other_port"].startswith("ConnectionRefusedError"), out
    assert out["other_port_of_cidr"].startswith("ConnectionRefusedError"), out
    assert out["cidr_rule"] == "ok:ping", out
    assert not out["udp_not_allowed"].startswith("ok"), out


def test_udp_rule_and_dns_only_through_the_node(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes, allow=[f"{UP2}:{ECHO_PORT}/udp"])
    out = probe(sb, f"""
        import struct
        q = struct.pack(">HHHHHH", 7, 0x100, 1, 0, 0, 0) + b"\\x03pkg\\x04test\\x00" + struct.pack(">HH", 1, 1)
        def dns(server):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
            try:
                s.sendto(q, (server, 53)); return "answer"
            except Exception as e: return type(e).__name__
            finally:
                try: s.recv(512)
                except Exception as e: pass
        def dns_answered(server):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
            try:
                s.sendto(q, (server, 53)); s.recv(512); return True
            except Exception: return False
        print(json.dumps({{"udp": udp("{UP2}", {ECHO_PORT}), "udp_tcp": tcp("{UP2}", {ECHO_PORT}),
                          "other_dns": dns_answered("{UP3}"), "node_dns": dns_answered(open("/etc/resolv.conf").read().split()[1])}}))""")
    assert out["udp"] == "ok:ping", out
    assert out["udp_tcp"].startswith("ConnectionRefusedError"), out  # /udp allows UDP only
    assert out["other_dns"] is False, out
    assert out["node_dns"] is True, out


def test_sandboxes_host_and_metadata_are_unreachable(server, runner, sandboxes, upstream):
    a = make(server, runner, sandboxes, allow=["10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8"])
    b = make(server, runner, sandboxes, allow=["10.0.0.0/8"])
    r = py(a, """
        import socket, threading
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("10.0.0.1", 9))
        print(u.getsockname()[0])
        """)
    a_ip = r.stdout.strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", a_ip), r.raw
    a.start(["python3", "-c", "import socket,time\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
             "s.bind(('0.0.0.0', 9999)); s.listen()\nwhile True: c,_=s.accept(); c.sendall(b'pong'); c.close()"])
    time.sleep(0.5)
    gw = open_resolv_gateway(b)
    api_port = int(server.url.rsplit(":", 1)[1])
    out = probe(b, f"""
        print(json.dumps({{"other_sandbox": tcp("{a_ip}", 9999), "gateway_ssh": tcp("{gw}", 22),
                          "gateway_api": tcp("{gw}", {api_port}), "host_upstream_side": tcp("{NET_UPSTREAM}.1", 22),
                          "metadata": tcp("169.254.169.254", 80)}}))""")
    for k, v in out.items():
        assert not v.startswith("ok"), (k, out)
    self_out = probe(a, f"""print(json.dumps({{"own_port_via_lo": tcp("127.0.0.1", 9999)}}))""")
    assert self_out["own_port_via_lo"] == "ok:pong", self_out  # a rule for 127/8 only means its own lo


def open_resolv_gateway(sb) -> str:
    return sb.run("cat /etc/resolv.conf").stdout.split()[1]


def test_raw_sockets_ipv6_and_network_changes_are_refused(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes, allow=[f"{UP2}/32"])
    out = probe(sb, f"""
        import fcntl, struct
        res = {{}}
        for label, args in [("raw", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                            ("ping", (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)),
                            ("packet", (socket.AF_PACKET, socket.SOCK_RAW, 0)),
                            ("raw6", (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))]:
            try: socket.socket(*args); res[label] = "created"
            except OSError as e: res[label] = e.errno
        s6 = socket.socket(socket.AF_INET6); s6.settimeout(2)
        try: s6.connect(("2001:db8::1", 80)); res["v6"] = "connected"
        except OSError as e: res["v6"] = e.errno
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        ifr = struct.pack("16sH14s", b"eth0", 0, b"")
        try: fcntl.ioctl(s, 0x8914, ifr); res["link_down"] = "done"    # SIOCSIFFLAGS
        except OSError as e: res["link_down"] = e.errno
        addr = struct.pack("16sH2s4s8s", b"eth0", socket.AF_INET, b"", socket.inet_aton("{UP3}"), b"")
        try: fcntl.ioctl(s, 0x8916, addr); res["set_addr"] = "done"    # SIOCSIFADDR
        except OSError as e: res["set_addr"] = e.errno
        try: open("/proc/sys/net/ipv4/ip_forward", "w").write("1"); res["sysctl"] = "done"
        except OSError as e: res["sysctl"] = e.errno
        print(json.dumps(res))""")
    assert out["raw"] in (1, 13) and out["packet"] in (1, 13, 97) and out["raw6"] in (1, 13, 97), out
    assert out["ping"] in (1, 13), out
    # Its IPv6 goes to the firewall, which refuses what no rule allows (a TCP reset,
    # ECONNREFUSED); a node whose host cannot forward IPv6 gives it no route at all.
    assert out["v6"] in (111, 101, 99, 97), out
    assert out["link_down"] == 1 and out["set_addr"] == 1, out  # EPERM: not its namespace to change
    assert out["sysctl"] in (1, 13, 30), out


# The talking loop of the cut tests: once `s` is connected (and READY printed), one byte
# each way every 50 ms until the connection fails, then "cut <time> <error>".
TALK = """
print("ready", flush=True)
while True:
    try:
        s.sendall(b"x")
        if s.recv(1) != b"x": raise OSError("closed")
    except OSError as e:
        print("cut", time.time(), type(e).__name__, flush=True)
        break
    time.sleep(0.05)
"""


def assert_cut_within_a_second(sb, connect: str, change, what: str):
    """Runs `connect` (python that leaves a connected socket in `s`) and TALK in `sb`, calls
    `change()` once it talks, and asserts the connection fails less than a second later."""
    exec_id = sb.start(["python3", "-c", "import os, socket, time\n" + textwrap.dedent(connect) + TALK],
                       timeout=60)
    deadline = time.time() + 20
    while "ready" not in sb.exec_result(exec_id).stdout:
        assert time.time() < deadline, sb.exec_result(exec_id).raw
        time.sleep(0.1)
    time.sleep(0.3)
    t0 = time.time()
    change()
    while sb.exec_result(exec_id).state != "exited":
        assert time.time() < t0 + 10, f"the {what} was not cut"
        time.sleep(0.05)
    res = sb.exec_result(exec_id)
    cut_at = float(res.stdout.split("cut", 1)[1].split()[0])
    assert cut_at - t0 < 1.0, (cut_at - t0, res.raw)


def test_stage_change_closes_the_network_within_a_second(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes, allow=[f"pkg.test:{ECHO_PORT}/tcp", f"pkg.test:{HTTP_PORT}/tcp"])
    # "setup": a long-lived connection that talks every 50 ms; then "evaluation".
    assert_cut_within_a_second(sb, f"""s = socket.create_connection(("pkg.test", {ECHO_PORT}), timeout=5)""",
                               lambda: sb.set_network(None), "established connection")
    out = probe(sb, f"""print(json.dumps({{"new": tcp("pkg.test", {ECHO_PORT}), "ip": tcp("{UP2}", {ECHO_PORT})}}))""")
    assert out["new"].startswith("gaierror") or out["new"].startswith("OSError:101"), out
    assert out["ip"].startswith("OSError:101:"), out
    # ... and back: a sandbox made without network gets a link on its first egress.
    sb.set_network([f"{UP2}:{ECHO_PORT}/tcp"])
    assert probe(sb, f"""print(json.dumps(tcp("{UP2}", {ECHO_PORT})))""") == "ok:ping"


@pytest.mark.serve_only("VMs: the cluster's test nodes run without microVMs")
@pytest.mark.parametrize("backend", ["microvm", "vm"])
def test_vm_egress_follows_the_same_policy(request, server, sandboxes, upstream, backend):
    """A microVM's NIC (and a whole VM's, systemd as init) is bridged into its sandbox's
    namespace: the same firewall, resolver and proxy decide what it reaches, over IPv4 and
    IPv6 (the guest's agent gives eth0 the sandbox's IPv6 address too), and a stage change
    refuses new connections at once."""
    image = request.getfixturevalue("runner" if backend == "microvm" else "vm_image")
    sb = server.client().create({"image": image, "backend": backend, "network": {
        "mode": "egress", "allow": [f"pkg.test:{ECHO_PORT}/tcp", f"pkg.test:{HTTP_PORT}/tcp",
                                    f"v6.test:{ECHO_PORT}/tcp"]}})
    sandboxes.append(sb.id)
    out = probe(sb, PROBE6 + textwrap.dedent(f"""
        import urllib.request
        print(json.dumps({{
            "by_name": tcp("pkg.test", {ECHO_PORT}), "other_name": name("other.test"),
            "other_host": tcp("{UP3}", {ECHO_PORT}), "other_port": tcp("{UP2}", 22),
            "proxy": urllib.request.urlopen("http://pkg.test/hello.txt", timeout=20).read().decode(),
            "v6": tcp6("v6.test", {ECHO_PORT}), "v6_other_port": tcp6("{UP6}", {HTTP_PORT}),
        }}))"""))
    assert out["v6"] == "ok:ping" and out["v6_other_port"].startswith("ConnectionRefused"), out
    assert out["by_name"] == "ok:ping", out
    assert out["other_name"] == "gaierror", out
    assert out["other_host"].startswith("ConnectionRefusedError"), out
    assert out["other_port"].startswith("ConnectionRefusedError"), out
    assert out["proxy"] == "hello from upstream\n", out
    sb.set_network(None)
    out = probe(sb, f"""print(json.dumps(tcp("{UP2}", {ECHO_PORT})))""")
    assert out.startswith("ConnectionRefusedError") and float(out.split(":")[2]) < 1.0, out
    sb.set_network([f"{UP2}:{ECHO_PORT}/tcp"])
    assert probe(sb, f"""print(json.dumps(tcp("{UP2}", {ECHO_PORT})))""") == "ok:ping"


def test_none_sandbox_can_be_opened_later(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes)
    assert probe(sb, f"""print(json.dumps(tcp("{UP2}", {ECHO_PORT})))""").startswith("OSError:101")
    sb.set_network([f"pkg.test:{ECHO_PORT}"])
    assert sb.network == {"mode": "egress", "allow": [f"pkg.test:{ECHO_PORT}"]}
    assert probe(sb, f"""print(json.dumps(tcp("pkg.test", {ECHO_PORT})))""") == "ok:ping"
    got = server.http("GET", "/v1/sandboxes/" + sb.id).json
    assert got["network"]["mode"] == "egress"


def proxy_get(sb, url: str, headers=None):
    hdrs = json.dumps(headers or {})
    r = py(sb, f"""
        import json, urllib.request, urllib.error
        req = urllib.request.Request({url!r}, headers=json.loads({hdrs!r}))
        try:
            r = urllib.request.urlopen(req, timeout=20)
            print(json.dumps({{"status": r.status, "len": len(r.read()), "cache": r.headers.get("X-Cache")}}))
        except urllib.error.HTTPError as e:
            print(json.dumps({{"status": e.code, "why": e.headers.get("X-Warren-Error"), "body": e.read().decode()}}))
        """)
    assert r.exit_code == 0, r.raw
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_proxy_enforces_the_policy_by_name_and_host_header(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes, allow=[f"pkg.test:{HTTP_PORT}/tcp", "*.wild.test"])
    ok = proxy_get(sb, "http://pkg.test/hello.txt")
    assert ok["status"] == 200 and ok["len"] == len("hello from upstream\n"), ok
    refused = proxy_get(sb, "http://other.test/hello.txt")
    assert refused["status"] == 403 and "not allowed" in refused["why"], refused
    assert "other.test:80" in refused["body"]
    by_ip = proxy_get(sb, f"http://{UP3}/hello.txt")
    assert by_ip["status"] == 403, by_ip
    # The Host header must agree with the URL: no virtual-host steering.
    steer = proxy_get(sb, "http://pkg.test/hello.txt", headers={"Host": "other.test"})
    assert steer["status"] == 400 and "Host header" in steer["why"], steer
    # An allowed name that resolves to the node itself or to link-local: never reached.
    for host in ("loop.wild.test", "meta.wild.test"):
        r = proxy_get(sb, f"http://{host}:{HTTP_PORT}/")
        assert r["status"] == 403 and "loopback" in r["why"], (host, r)


def test_proxy_reaches_an_ipv6_only_host_under_the_same_policy(server, runner, sandboxes, upstream):
    """IPv6 egress through the proxy: `v6.test` has only an IPv6 address (the test host's, in
    the node's hosts file). Allowed by name it is fetched; an IPv6 literal needs an address
    rule, as an IPv4 one does; loopback and an IPv6 address standing for a forbidden IPv4
    one are never reached, whatever the rules say."""
    by_name = make(server, runner, sandboxes, allow=["v6.test"])
    ok = proxy_get(by_name, "http://v6.test/hello.txt")
    assert ok["status"] == 200 and ok["len"] == len("hello from upstream\n"), ok
    literal = f"http://[{UP6}]/hello.txt"
    refused = proxy_get(by_name, literal)
    assert refused["status"] == 403 and "not allowed" in refused["why"], refused
    by_rule = make(server, runner, sandboxes, allow=[f"[{NET_UPSTREAM6}::/64]:80/tcp"])
    ok = proxy_get(by_rule, literal)
    assert ok["status"] == 200 and ok["len"] == len("hello from upstream\n"), ok
    assert proxy_get(by_rule, "http://v6.test/hello.txt")["status"] == 403  # not by name
    anything = make(server, runner, sandboxes, allow=["::/0", "*.wild.test"])
    for url in (f"http://[::1]:{HTTP_PORT}/", f"http://[::ffff:127.0.0.1]:{HTTP_PORT}/",
                f"http://[::ffff:169.254.169.254]:{HTTP_PORT}/", f"http://[fe80::1]:{HTTP_PORT}/",
                f"http://loop6.wild.test:{HTTP_PORT}/", f"http://mapped6.wild.test:{HTTP_PORT}/"):
        r = proxy_get(anything, url)
        assert r["status"] == 403 and "loopback" in r["why"], (url, r)


PROBE6 = """
def tcp6(host, port, t=4):
    return tcp(host, port, t, socket.AF_INET6)
def udp6(host, port, t=2):
    return udp(host, port, t, socket.AF_INET6)
def aaaa(n):
    try: return sorted({a[4][0] for a in socket.getaddrinfo(n, 80, socket.AF_INET6, socket.SOCK_STREAM)})
    except Exception as e: return f"{type(e).__name__}"
def own6():
    return open("/proc/net/if_inet6").read()
"""


def test_sandboxes_reach_ipv6_hosts_directly_under_the_same_policy(server, runner, sandboxes, upstream):
    """A sandbox in egress mode has an IPv6 address of its own (its IPv4 one inside the node's
    unique-local /96) and an IPv6 default route: an IPv6-only host is reached directly, by an
    allowed name (the node's DNS answers AAAA and opens what it answers) or by an address rule,
    on the rule's ports only; everything else is refused as for IPv4, and a policy change cuts
    an IPv6 connection as fast as an IPv4 one."""
    nodes = server.http("GET", "/v1/nodes").json["nodes"]
    assert all(n["network"]["ipv6"] for n in nodes), [n["network"] for n in nodes]
    by_name = make(server, runner, sandboxes, allow=[f"v6.test:{ECHO_PORT}/tcp"])
    out = probe(by_name, PROBE6 + textwrap.dedent(f"""
        print(json.dumps({{
            "own": own6(), "aaaa": aaaa("v6.test"), "a": name("v6.test"),
            "by_name": tcp6("v6.test", {ECHO_PORT}), "by_address_then": tcp6("{UP6}", {ECHO_PORT}),
            "other_port": tcp6("{UP6}", {HTTP_PORT}), "udp": udp6("{UP6}", {ECHO_PORT}),
            "not_allowed_name": aaaa("pkg.test"), "ipv4_still": tcp("{UP2}", {ECHO_PORT}),
        }}))"""))
    assert "fd57617272656e00" in out["own"], out["own"]  # its address in the node's /96
    assert out["aaaa"] == [ipaddress.ip_address(UP6).compressed] and out["a"] == "gaierror", out  # IPv6 only: no A record
    assert out["by_name"] == "ok:ping" and out["by_address_then"] == "ok:ping", out
    assert out["other_port"].startswith("ConnectionRefusedError"), out  # the rule's port only
    assert not out["udp"].startswith("ok"), out
    assert out["not_allowed_name"] == "gaierror", out
    assert out["ipv4_still"].startswith("ConnectionRefusedError"), out

    by_rule = make(server, runner, sandboxes, allow=[f"[{NET_UPSTREAM6}::/64]:{ECHO_PORT}"])
    out = probe(by_rule, PROBE6 + textwrap.dedent(f"""
        print(json.dumps({{"tcp": tcp6("{UP6}", {ECHO_PORT}), "udp": udp6("{UP6}", {ECHO_PORT}),
                          "name": aaaa("v6.test"), "other_port": tcp6("{UP6}", {HTTP_PORT}),
                          "host": tcp6("{NET_UPSTREAM6}::1", {ECHO_PORT})}}))"""))
    assert out["tcp"] == "ok:ping" and out["udp"] == "ok:ping", out
    assert out["name"] == "gaierror", out  # an address rule opens no name
    assert out["other_port"].startswith("ConnectionRefusedError"), out
    # The node's own address on that net: the host is never a destination.
    assert not out["host"].startswith("ok"), out

    # Never, whatever the rules say: other sandboxes, link-local, the v4-mapped forms.
    anything = make(server, runner, sandboxes, allow=["::/0"])
    own = anything.run("python3 -c \"print(open('/proc/net/if_inet6').read())\"").stdout
    other = next(l.split()[0] for l in by_rule.run("cat /proc/net/if_inet6").stdout.splitlines()
                 if l.startswith("fd57"))
    other = ":".join(other[i:i + 4] for i in range(0, 32, 4))
    out = probe(anything, PROBE6 + textwrap.dedent(f"""
        print(json.dumps({{"sandbox": tcp6("{other}", {ECHO_PORT}, t=2),
                          "mapped": tcp6("::ffff:{UP2}", {ECHO_PORT}, t=2),
                          "any": tcp6("{UP6}", {ECHO_PORT})}}))"""))
    assert out["any"] == "ok:ping", (out, own)
    assert not out["sandbox"].startswith("ok") and not out["mapped"].startswith("ok"), out
    via_proxy = proxy_get(anything, f"http://[{other}]:{HTTP_PORT}/")
    assert via_proxy["status"] == 403 and "sandbox network" in via_proxy["why"], via_proxy

    assert_cut_within_a_second(
        by_rule, f"s = socket.socket(socket.AF_INET6); s.connect(('{UP6}', {ECHO_PORT}))",
        lambda: by_rule.set_network(mode="egress", allow=[f"{UP3}/32"]), "IPv6 connection")
    # Through mode none (link down) and back: its address and route are there again.
    by_rule.set_network(None)
    assert probe(by_rule, PROBE6 + f"print(json.dumps(tcp6('{UP6}', {ECHO_PORT})))").startswith("OSError:101")
    by_rule.set_network([f"[{UP6}/128]:{ECHO_PORT}/tcp"])
    assert probe(by_rule, PROBE6 + f"print(json.dumps(tcp6('{UP6}', {ECHO_PORT})))") == "ok:ping"


def test_connect_checks_the_tls_server_name(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes, allow=[f"pkg.test:{ECHO_PORT}/tcp", f"{UP3}:{ECHO_PORT}/tcp"])
    out = probe(sb, f"""
        import os, struct
        proxy = os.environ["https_proxy"].split("//")[1]
        host, port = proxy.split(":")
        def hello(name):
            n = name.encode()
            ext = struct.pack(">HHHBH", 0, len(n) + 5, len(n) + 3, 0, len(n)) + n
            body = b"\\x03\\x03" + b"r" * 32 + b"\\x00" + b"\\x00\\x02\\x13\\x01" + b"\\x01\\x00" + struct.pack(">H", len(ext)) + ext
            hs = b"\\x01" + len(body).to_bytes(3, "big") + body
            return b"\\x16\\x03\\x01" + struct.pack(">H", len(hs)) + hs
        def tunnel(target, sni):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(f"CONNECT {{target}} HTTP/1.1\\r\\nHost: {{target}}\\r\\n\\r\\n".encode())
            head = b""
            while b"\\r\\n\\r\\n" not in head:
                d = s.recv(1)
                if not d: break
                head += d
            status = head.split(b" ")[1].decode() if head else "closed"
            if status != "200": return status
            msg = hello(sni) if sni else b"plain bytes"
            s.sendall(msg)
            got = b""
            try:
                while len(got) < len(msg):
                    d = s.recv(65536)
                    if not d: break
                    got += d
            except OSError: pass
            return "echoed" if got == msg else "closed"
        print(json.dumps({{"same": tunnel("pkg.test:{ECHO_PORT}", "pkg.test"),
                          "other_allowed": tunnel("pkg.test:{ECHO_PORT}", "{UP3}"),
                          "fronted": tunnel("pkg.test:{ECHO_PORT}", "other.test"),
                          "no_tls": tunnel("pkg.test:{ECHO_PORT}", None),
                          "denied": tunnel("other.test:{ECHO_PORT}", "other.test")}}))""")
    assert out == {"same": "echoed", "other_allowed": "echoed", "fronted": "closed", "no_tls": "echoed",
                   "denied": "403"}, out


def metrics(server) -> dict:
    text = server.http("GET", "/metrics").body.decode()
    out = {"upstream": 0, "cache": 0}
    for line in text.splitlines():  # a cluster's API servers give one sample per node
        m = re.match(r'warren_egress_bytes_total\{(?:node="[^"]+",)?source="(\w+)"\} (\d+)', line)
        if m:
            out[m.group(1)] += int(m.group(2))
    return out


def test_proxy_cache_serves_the_second_download(server, runner, sandboxes, upstream):
    a = make(server, runner, sandboxes, allow=["pkg.test"])
    b = make(server, runner, sandboxes, allow=["pkg.test"], beside=a)
    before = metrics(server)
    first = proxy_get(a, "http://pkg.test/debian/pool/main/w/warren-hello/warren-hello_1.0_all.deb")
    assert first["status"] == 200 and first["cache"] is None, first
    mid = metrics(server)
    assert mid["upstream"] - before["upstream"] >= first["len"]
    second = proxy_get(b, "http://pkg.test/debian/pool/main/w/warren-hello/warren-hello_1.0_all.deb")
    assert second["status"] == 200 and second["cache"] == "HIT from warren" and second["len"] == first["len"], second
    after = metrics(server)
    assert after["cache"] - mid["cache"] == first["len"]
    assert after["upstream"] == mid["upstream"]  # nothing fetched for the second
    per = server.http("GET", "/metrics").body.decode()
    assert re.search(rf'^warren_egress_sandbox_bytes_total\{{(node="{b.node}",)?sandbox="{b.id}",source="cache"\}} '
                     rf'{first["len"]}$', per, re.M), per


def _requests_since(log: Path, mark: int):
    lines = log.read_text().splitlines()[mark:]
    return [l.split() for l in lines]


def test_apt_installs_through_the_proxy_then_from_the_cache(server, runner, sandboxes, upstream):
    """The real client: apt-get update && apt-get install in two Debian sandboxes with the
    (test) Debian archive allowed; the second is served from the cache; then with the policy
    at none the same command fails fast with a clear error."""
    script = ("rm -f /etc/apt/sources.list.d/* && "
              "echo 'deb [trusted=yes] http://deb.debian.org/debian bookworm main' > /etc/apt/sources.list && "
              "apt-get update -q && apt-get install -y -q --no-install-recommends warren-hello && warren-hello")
    log = upstream["log"]
    results = []
    for i in range(2):
        sb = make(server, runner, sandboxes, allow=["deb.debian.org:80/tcp"], beside=sb if i else None)
        mark = len(log.read_text().splitlines())
        r = sb.run(script, timeout=300)
        assert r.exit_code == 0, r.raw
        assert "hello from a cached package" in r.stdout
        results.append(_requests_since(log, mark))
        if i == 1:
            t0 = time.time()
            sb.set_network(None)
            r = sb.run(script, timeout=120)
            took = time.time() - t0
            assert r.exit_code != 0
            assert took < 20, took
            text = r.stdout + r.stderr
            assert re.search(r"Network is unreachable|Could not connect", text), text[-2000:]
    first, second = results
    assert any(req[0] == "GET" and req[1].endswith(".deb") and req[2] == "200" for req in first), first
    downloads = [req for req in second if req[2] == "200"]
    assert downloads == [], f"the second run fetched bodies from upstream: {downloads}"


def test_policy_rules_are_validated(server, runner, sandboxes):
    for bad in (["*.com"], ["10.0.0.0/40"], ["host:0"], ["exa mple.org"]):
        r = server.http("POST", "/v1/sandboxes", {"image": runner, "network": {"mode": "egress", "allow": bad}})
        assert r.status == 400 and "bad network rule" in r.json["error"]["message"], r
    r = server.http("POST", "/v1/sandboxes", {"image": runner, "network": {"mode": "none", "allow": ["x.org"]}})
    assert r.status == 400
    sb = make(server, runner, sandboxes)
    r = server.http("PUT", f"/v1/sandboxes/{sb.id}/network", {"mode": "egress", "allow": ["*.org"]})
    assert r.status == 400, r
    r = server.http("PUT", f"/v1/sandboxes/{sb.id}/network", {"mode": "egress", "allow": ["x.org"], "extra": 1})
    assert r.status == 400, r


def test_cli_net_changes_the_policy(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes)
    r = server.cli("net", sb.id, "--allow", f"pkg.test:{ECHO_PORT}/tcp")
    assert r.returncode == 0, r.stderr
    assert probe(sb, f"""print(json.dumps(tcp("pkg.test", {ECHO_PORT})))""") == "ok:ping"
    r = server.cli("net", sb.id, "--none")
    assert r.returncode == 0, r.stderr
    assert probe(sb, f"""print(json.dumps(tcp("{UP2}", {ECHO_PORT})))""").startswith("OSError:101")
    # Several rules after one --allow, as the contract writes it.
    r = server.cli("net", sb.id, "--allow", f"pkg.test:{ECHO_PORT}/tcp", f"other.test:{ECHO_PORT}/tcp")
    assert r.returncode == 0, r.stderr
    assert server.http("GET", f"/v1/sandboxes/{sb.id}").json["network"]["allow"] == [
        f"pkg.test:{ECHO_PORT}/tcp", f"other.test:{ECHO_PORT}/tcp"]


def test_rules_without_a_mode_mean_egress(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes)
    r = server.http("PUT", f"/v1/sandboxes/{sb.id}/network", {"allow": [f"pkg.test:{ECHO_PORT}/tcp"]})
    assert r.status == 200 and r.json["network"]["mode"] == "egress", r
    assert probe(sb, f"""print(json.dumps(tcp("pkg.test", {ECHO_PORT})))""") == "ok:ping"
    r = server.http("POST", "/v1/sandboxes", {"image": runner, "network": {"allow": ["pkg.test"]}})
    assert r.status == 201 and r.json["network"] == {"mode": "egress", "allow": ["pkg.test"]}, r
    sandboxes.append(r.json["id"])
    assert server.http("PUT", f"/v1/sandboxes/{sb.id}/network", {}).json["network"]["mode"] == "none"


def test_nothing_is_left_after_delete(server, runner, upstream):
    c = server.client()
    sbs = [c.create({"image": runner, "network": {"mode": "egress", "allow": ["pkg.test"]}}) for _ in range(3)]
    ips = [py(sb, """
        import socket; u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("10.0.0.1", 9)); print(u.getsockname()[0])
        """).stdout.strip() for sb in sbs]
    for sb in sbs:
        sb.delete()
    table = _sh("nft", "list", "ruleset").stdout
    names = []
    for ip in ips:
        n = sum(int(p) << (8 * (3 - i)) for i, p in enumerate(ip.split(".")))
        assert f"sb_{n} " not in table and f"sb_{n}_" not in table, ip
        names.append(f"wv{n:08x}")
    # The veth goes with its namespace, which the kernel tears down in the background.
    deadline = time.time() + 20
    while any(n in _sh("ip", "-o", "link").stdout for n in names):
        assert time.time() < deadline, "veths left behind"
        time.sleep(0.2)


def test_policy_survives_kill9_of_the_daemon(tmp_path, upstream):
    """A daemon killed with -9 comes back and finds its egress sandboxes' networks: the
    policy is still enforced and can still be changed."""
    from conftest import Server, _build_rootfs, _free_port, _scratch_base, _warren_bin, safe_rmtree
    base = _scratch_base()
    data = tempfile.mkdtemp(prefix="warren-e2e-netrestart-", dir=base)
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-netrestart-root-", dir=base))
    srv = Server(_warren_bin(), data, _free_port(), str(tmp_path / "serve.log"), str(tmp_path / "home"))
    hosts = os.path.join(data, "hosts")
    with open(hosts, "w") as f:
        f.write(f"{UP2} pkg.test\n")
    # Its own subnet: the session's server holds the default one.
    srv.extra_args = ["--dns-hosts", hosts, "--net-subnet", "10.91.0.0/16"]
    srv.start()
    try:
        _build_rootfs(root)
        assert srv.cli("image", "build", "nr:1", "--from-dir", str(root), timeout=300).returncode == 0

        def nc(sid, host):
            r = srv.http("POST", f"/v1/sandboxes/{sid}/exec",
                         {"cmd": f"echo ping | nc -w 2 {host} {ECHO_PORT}", "timeout_s": 20})
            assert r.status == 200, r
            return r.json["stdout"].strip()

        r = srv.http("POST", "/v1/sandboxes", {"image": "nr:1", "network": {"mode": "egress",
                                                                           "allow": [f"{UP2}:{ECHO_PORT}/tcp"]}})
        assert r.status == 201, r
        sid = r.json["id"]
        assert nc(sid, UP2) == "ping"
        assert nc(sid, UP3) == ""
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=20)
        time.sleep(0.5)
        srv.start()
        assert srv.http("GET", f"/v1/sandboxes/{sid}").json["state"] == "running"
        assert nc(sid, UP2) == "ping"
        assert nc(sid, UP3) == ""
        r = srv.http("PUT", f"/v1/sandboxes/{sid}/network", {"mode": "none"})
        assert r.status == 200, r
        assert nc(sid, UP2) == ""
        r = srv.http("PUT", f"/v1/sandboxes/{sid}/network", {"mode": "egress", "allow": [f"{UP3}:{ECHO_PORT}/tcp"]})
        assert r.status == 200, r
        assert nc(sid, UP3) == "ping" and nc(sid, UP2) == ""
        assert srv.http("DELETE", f"/v1/sandboxes/{sid}").status == 204
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.delete_all_sandboxes()
        srv.stop()
        safe_rmtree(data)
        safe_rmtree(str(root))
    table = _sh("nft", "list", "tables").stdout
    parent = "warren-" + __import__("hashlib").sha256(os.path.realpath(data).encode()).hexdigest()[:8]
    assert parent not in table, table  # a clean stop takes the node's table along


def test_a_dead_daemons_idle_bridge_is_taken_back_a_used_one_is_not(tmp_path):
    """A daemon killed with -9 whose data dir is never used again leaves its bridge (with the
    subnet's gateway address) and its nftables table. Another daemon on that subnet takes
    them back if no sandbox hangs on the bridge; while one does, it refuses with the reason.
    The bridge's alias names its owner file, which a live daemon holds."""
    from conftest import Server, _build_rootfs, _free_port, _scratch_base, _warren_bin, safe_rmtree
    base = _scratch_base()
    root = Path(tempfile.mkdtemp(prefix="warren-e2e-deadnet-root-", dir=base))
    _build_rootfs(root)
    servers, dirs = [], [str(root)]
    for name in ("a", "b"):
        d = tempfile.mkdtemp(prefix=f"warren-e2e-deadnet-{name}-", dir=base)
        dirs.append(d)
        srv = Server(_warren_bin(), d, _free_port(), str(tmp_path / f"{name}.log"), str(tmp_path / f"home-{name}"))
        srv.extra_args = ["--net-subnet", "10.93.0.0/16", "--warm-pool", "0"]
        servers.append(srv)
    a, b = servers

    def bridge_of(srv):
        return "wr" + __import__("hashlib").sha256(os.path.realpath(srv.data_dir).encode()).hexdigest()[:8]

    def start_with_image(srv):
        srv.start()
        if srv.http("GET", "/v1/layers").json["layers"] == []:
            assert srv.cli("image", "build", "dn:1", "--from-dir", str(root), timeout=300).returncode == 0

    def kill(srv):
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=20)

    egress = {"image": "dn:1", "network": {"mode": "egress", "allow": ["10.0.0.1/32"]}}
    try:
        start_with_image(a)
        alias = Path(f"/sys/class/net/{bridge_of(a)}/ifalias").read_text()
        assert alias.startswith("warren-net table=warren-") and " owner=/run/warren/" in alias, alias
        r = a.http("POST", "/v1/sandboxes", egress)
        assert r.status == 201, r
        sid = r.json["id"]
        kill(a)

        # A sandbox of the dead daemon still uses the bridge: not ours to take.
        start_with_image(b)
        r = b.http("POST", "/v1/sandboxes", egress)
        assert r.status == 503, r
        msg = r.json["error"]["message"]
        assert "stopped while 1 of its sandboxes still use it" in msg and "/run/" not in msg, msg
        b.stop()

        # Its owner comes back, adopts it and ends it, then dies again: the bridge is idle.
        start_with_image(a)
        assert a.http("DELETE", f"/v1/sandboxes/{sid}").status == 204
        kill(a)
        assert bridge_of(a) in _sh("ip", "-o", "link").stdout

        start_with_image(b)
        r = b.http("POST", "/v1/sandboxes", egress)
        assert r.status == 201, r
        assert "taking back subnet 10.93.0.0/16 from " + bridge_of(a) in b.log_tail(400)
        assert bridge_of(a) not in _sh("ip", "-o", "link").stdout
        assert "warren-" + bridge_of(a)[2:] not in _sh("nft", "list", "tables").stdout
        assert b.http("DELETE", f"/v1/sandboxes/{r.json['id']}").status == 204
    finally:
        for srv in (b, a):
            if srv.proc is not None and srv.proc.poll() is None:
                srv.delete_all_sandboxes()
                srv.stop()
        # What the killed daemon left (cgroups, run files) goes with a clean stop of it.
        a.start()
        a.stop()
        for d in dirs:
            safe_rmtree(d)
    assert bridge_of(a) not in _sh("ip", "-o", "link").stdout
    assert bridge_of(b) not in _sh("ip", "-o", "link").stdout


def test_stage_change_cuts_connections_through_the_proxy(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes, allow=[f"pkg.test:{ECHO_PORT}/tcp"])
    connect = f"""
        host, port = os.environ["https_proxy"].split("//")[1].split(":")
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"CONNECT pkg.test:{ECHO_PORT} HTTP/1.1\\r\\nHost: pkg.test\\r\\n\\r\\n")
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            head += s.recv(1)
        assert b" 200 " in head, head
        """
    # Still egress, but not to pkg.test.
    assert_cut_within_a_second(sb, connect, lambda: sb.set_network([f"other.test:{ECHO_PORT}/tcp"]), "tunnel")


def test_network_of_a_paused_sandbox_changes_and_holds_after_resume(server, runner, sandboxes, upstream):
    sb = make(server, runner, sandboxes)
    sb.pause()
    t0 = time.time()
    sb.set_network([f"pkg.test:{ECHO_PORT}/tcp"])  # answers at once: nothing waits for the frozen agent
    assert time.time() - t0 < 5
    assert server.http("GET", f"/v1/sandboxes/{sb.id}").json["network"]["mode"] == "egress"
    sb.resume()
    assert probe(sb, f"""print(json.dumps(tcp("pkg.test", {ECHO_PORT})))""") == "ok:ping"


def _netns(sb) -> str:
    r = sb.run(["readlink", "/proc/self/ns/net"])
    assert r.exit_code == 0, r.raw
    return r.stdout.strip()


def _pool_counter(server, key: str) -> int:
    return sum((n.get("network") or {}).get("pool", {}).get(key, 0)
               for n in server.http("GET", "/v1/nodes").json["nodes"])


def test_a_namespace_is_lent_again_only_as_new(server, runner, sandboxes):
    """A deleted sandbox's network namespace (mode none: lo only, the node's) goes to a later
    sandbox only if nothing in it tells of the last occupant (docs/design.md, "Network"): one
    that carried a packet, found no route for a connect, or left a TCP connection in
    time-wait is never seen again."""
    used = {}
    for what, code in {
        "a packet on lo": """
            import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9))""",
        "a connect with no route": """
            import socket
            try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(("10.0.0.1", 9))
            except OSError: pass""",
        "a connection on lo": """
            import socket; l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
            c = socket.create_connection(l.getsockname()); a, _ = l.accept(); c.close(); a.close()""",
    }.items():
        sb = make(server, runner, sandboxes)
        used[_netns(sb)] = what
        assert py(sb, code).exit_code == 0, what
        sb.delete()
        sandboxes.remove(sb.id)
    reused0 = _pool_counter(server, "bare_reused")
    clean = make(server, runner, sandboxes)
    _netns(clean)  # a command ran; the network was not touched
    clean.delete()
    sandboxes.remove(clean.id)
    assert _pool_counter(server, "bare_reused") > reused0, "an untouched namespace was not kept"
    # More sandboxes than the pool keeps: none gets a namespace that was used.
    for _ in range(20):
        sb = make(server, runner, sandboxes)
        ns = _netns(sb)
        assert ns not in used, f"a namespace that saw {used[ns]} was lent again"
        sb.delete()
        sandboxes.remove(sb.id)
