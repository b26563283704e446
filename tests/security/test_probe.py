"""What a command inside a sandbox can reach, measured by tests/probe/probe.c.

Each test is a property a root occupant would exploit if it did not hold: host-root identity,
capabilities, missing seccomp/no_new_privs, a shared PID/cgroup/network namespace, host
devices or host paths in the mount table.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

# capability numbers (linux/capability.h)
CAP = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
    "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
    "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
    "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
    "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
    "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
    "SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
    "BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}
ALLOWED = {"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "SETGID", "SETUID", "SETFCAP", "SETPCAP",
           "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}
ALLOWED_MASK = sum(1 << CAP[n] for n in ALLOWED)
MUST_NOT = ["SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN", "NET_RAW", "MKNOD", "SYS_MODULE", "SYS_RAWIO",
            "SYS_BOOT", "SYS_TIME", "DAC_READ_SEARCH", "SYS_RESOURCE", "SYSLOG", "BPF", "PERFMON",
            "CHECKPOINT_RESTORE", "SYS_NICE", "LINUX_IMMUTABLE", "IPC_LOCK", "SYS_PACCT", "MAC_ADMIN",
            "MAC_OVERRIDE", "AUDIT_CONTROL", "SYS_TTY_CONFIG"]


def _names(mask: int):
    return sorted(n for n, b in CAP.items() if mask >> b & 1)


@pytest.fixture(scope="module")
def probe(shared_sb):
    return shared_sb.probe()


@pytest.fixture(scope="module")
def host_probe(probe_bin):
    r = subprocess.run([str(probe_bin)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _map(text: str):
    return [tuple(int(x) for x in line.split()) for line in text.strip().splitlines()]


def test_root_inside_is_an_unprivileged_host_uid(probe):
    """THREATS #11/#18/#28: sandbox root must never be host root."""
    assert probe["uid"] == 0 and probe["euid"] == 0, "the occupant is expected to be root inside"
    for field in ("uid_map", "gid_map"):
        rows = _map(probe[field])
        assert rows, f"{field} empty: {probe[field]!r}"
        for inside, outside, count in rows:
            assert outside >= 1_048_576, f"{field}: inside {inside} maps to host id {outside} (< 1,048,576)"
            assert outside + count <= 2 ** 32 - 1
            assert not (outside <= 0 < outside + count), f"{field} maps host id 0: {probe[field]!r}"
            assert count <= 65536, f"{field}: {count} ids mapped, more than one slot"


def test_capability_sets_are_reduced(probe):
    eff, prm, bnd = (int(probe[k], 16) for k in ("CapEff", "CapPrm", "CapBnd"))
    inh, amb = int(probe["CapInh"], 16), int(probe["CapAmb"], 16)
    extra = bnd & ~ALLOWED_MASK
    assert not extra, f"bounding set has more than the policy allows: {_names(extra)}"
    for name, m in (("CapEff", eff), ("CapPrm", prm), ("CapInh", inh), ("CapAmb", amb)):
        assert m & ~bnd == 0, f"{name} outside the bounding set: {_names(m & ~bnd)}"
    assert amb == 0, f"ambient capabilities: {_names(amb)}"
    held = set(_names(eff | prm | bnd | inh))
    bad = [c for c in MUST_NOT if c in held]
    assert not bad, f"commands hold {bad} (CapEff={probe['CapEff']} CapBnd={probe['CapBnd']})"


def test_no_new_privs_and_seccomp_filter(probe, host_probe):
    assert probe["NoNewPrivs"] == 1, "no_new_privs is off: setuid/file capabilities would work"
    assert probe["Seccomp"] == 2, f"no seccomp filter on commands (Seccomp: {probe['Seccomp']})"
    assert probe["Seccomp_filters"] >= 1
    # positive control: the host test process itself runs without a filter
    assert host_probe["Seccomp"] == 0


def test_landlock_available(probe):
    """Landlock must be usable by the kernel (the sandbox's domain is built on it); the ABI
    version is what the domain can express (6+: abstract UNIX socket and signal scoping)."""
    assert probe["landlock_abi"] >= 6, f"Landlock ABI {probe['landlock_abi']} (need >= 6 for scoping)"


def test_pid_namespace_shows_only_the_sandbox(probe, host_probe, server):
    """THREATS #31: no host process visible; PID 1 is the sandbox's agent."""
    assert probe["nprocs"] <= 3, f"{probe['nprocs']} processes visible: {probe['pids']}"
    assert probe["pid"] < 100 and probe["ppid"] == 1
    assert "warren" in (probe["proc1_comm"] or "") + (probe["proc1_cmdline0"] or ""), probe["proc1_comm"]
    # control: the host sees far more, including the daemon
    assert host_probe["nprocs"] > probe["nprocs"] + 5
    assert server.proc.pid in host_probe["pids"] or host_probe["nprocs"] > 256


def test_hostname_is_private(probe, host_probe):
    assert probe["hostname"] != host_probe["hostname"]


def test_cgroup_namespace_hides_host_paths(probe, host_probe):
    """THREATS #38/#39: the sandbox sees its own cgroups as the root, not host paths. Commands
    run in the sandbox's own `commands` child of the memory cgroup (so an OOM they cause
    never picks the agent): that one path is the sandbox's, not the host's."""
    assert probe["cgroup"], "no /proc/self/cgroup"
    for line in probe["cgroup"]:
        path = line.split(":", 2)[2]
        assert path in ("/", "/commands"), f"host cgroup path visible: {line!r}"
        assert "warren" not in line and "sb-" not in line, line


def test_mount_table_has_no_host_paths(probe, server):
    """THREATS #39: upperdir/lowerdir and bind sources must not reveal host locations."""
    needles = [server.data_dir, "/var/tmp", "/var/lib", "/run/warren", "/work", "/home", "/root"]
    allowed_prefixes = ("/proc", "/dev", "/sys")
    for m in probe["mounts"]:
        text = " ".join(str(m.get(k) or "") for k in ("root", "source", "options", "super"))
        leaked = [n for n in needles if n and n in text]
        assert not leaked, f"host path {leaked} in mount {m!r}"
        mp = m["mountpoint"]
        assert mp == "/" or mp.startswith(allowed_prefixes), f"unexpected mount {m!r}"


def test_only_harmless_devices(probe):
    """THREATS #40: no block devices, no kvm/vsock/fuse/tun/mem/kmsg; only the standard set."""
    allowed = {"1:3", "1:5", "1:7", "1:8", "1:9", "5:0", "5:1", "5:2"}
    for d in probe["dev"]:
        assert d["type"] != "b", f"block device in the sandbox: {d!r}"
        if d["type"] == "c":
            major = d["dev"].split(":")[0]
            assert d["dev"] in allowed or major == "136", f"unexpected device node {d!r}"


def test_network_is_loopback_only(probe, host_probe):
    """THREATS #36/#41: private network namespace, only lo, no route out."""
    assert probe["interfaces"] == ["lo"], probe["interfaces"]
    assert probe["default_route"] is False
    assert probe["ipv4_routes"] == 0 and probe["ipv6_routes_non_lo"] == 0
    # control: the host has more than loopback (the probe does see interfaces and routes)
    assert len(host_probe["interfaces"]) >= 1


def test_rlimits(probe):
    """No core dumps reach the host's core_pattern; a finite file-descriptor limit."""
    rl = probe["rlimits"]
    assert rl["CORE"]["soft"] == 0 and rl["CORE"]["hard"] == 0, rl["CORE"]
    assert 0 < rl["NOFILE"]["hard"] <= 1 << 20, rl["NOFILE"]



def test_landlock_domain_enforced(shared_sb, weak):
    """Landlock answers a denied mknod with EACCES before the capability check (EPERM) runs:
    EACCES on a character device node in /tmp shows the command is inside a Landlock domain
    that withholds MAKE_CHAR/MAKE_BLOCK.  Control: the weak sandbox (no Landlock) gets EPERM."""
    from sec_util import pick
    rs = [r for r in pick(shared_sb.attack("mknod"), "mknod") if r["path"].startswith("/tmp/")]
    assert rs and all(r["ret"] < 0 for r in rs), rs
    assert all(r["errno"] == "EACCES" for r in rs), f"no Landlock answer (EACCES) to mknod: {rs}"
    ctl = [r for r in pick(weak("mknod"), "mknod") if r["path"].startswith("/tmp/")]
    assert ctl and all(r["errno"] == "EPERM" for r in ctl), ctl


def test_no_leaked_descriptors_or_host_cwd(probe):
    """THREATS #2 (Leaky Vessels): a command holds only its stdio, and its cwd/root are the
    sandbox's (a leaked directory fd or a host cwd would let `..` walk the host)."""
    fds = {f["fd"]: f["target"] for f in probe["fds"]}
    assert set(fds) <= {0, 1, 2}, f"descriptors beyond stdio: {fds}"
    for fd, target in fds.items():
        assert target.startswith(("pipe:", "/dev/null", "socket:")) or target == "/dev/null", (fd, target)
        assert not target.startswith("/") or target == "/dev/null", f"fd {fd} -> {target}"
    assert probe["root"] == "/" and probe["cwd"].startswith("/"), (probe["root"], probe["cwd"])
