"""THREATS B.2: kernel control knobs reachable from root (#11-#17), through commands and
through the file API (which the agent serves with its own, larger privileges)."""

from __future__ import annotations

import os
import subprocess

import pytest

from sec_util import healthy, one, parse_results, pick


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _dmesg_sysrq_lines() -> int:
    r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20)
    return sum(1 for l in r.stdout.splitlines() if "sysrq" in l.lower())


def test_core_pattern(shared_sb, server):
    """#11: core_pattern runs a program as host root at the next crash."""
    before = _read("/proc/sys/kernel/core_pattern")
    results = shared_sb.attack("sysctl")
    cp = one(results, "core_pattern_write")
    assert cp["ret"] < 0, f"core_pattern written from the sandbox: {cp}"
    # the agent (file API) tries the same, writing back the current value
    r = shared_sb.put("/proc/sys/kernel/core_pattern", before.encode() or b"core\n")
    assert r.status != 204, f"file API wrote core_pattern: {r!r}"
    assert _read("/proc/sys/kernel/core_pattern") == before
    assert healthy(server)


def test_global_sysctls_not_writable(shared_sb):
    """#12/#14/#16: modprobe, drop_caches, panic, ASLR, overcommit, io_uring_disabled, binfmt_misc."""
    rs = pick(shared_sb.attack("sysctl"), "sysctl_open_write")
    assert len(rs) >= 6, rs
    opened = [r for r in rs if r["ret"] >= 0]
    assert not opened, f"global sysctls open for writing: {opened}"


def test_sysrq_trigger(shared_sb, server):
    """#13: 'h' to sysrq-trigger only prints help: a new "sysrq" line in the host's kernel log
    would prove the write reached the real trigger (this kernel may lack sysrq entirely)."""
    before = _dmesg_sysrq_lines()
    r = one(shared_sb.attack("sysrq"), "sysrq_trigger")
    if r["ret"] >= 0:
        assert r["file"] == "c1:3", f"sysrq-trigger writable and not masked by /dev/null: {r}"
    api = shared_sb.put("/proc/sysrq-trigger", b"h")
    assert _dmesg_sysrq_lines() == before, f"sysrq reached the host kernel (command {r}, file API {api!r})"
    assert healthy(server)


def test_kernel_memory_and_address_leaks(shared_sb, attack_bin):
    """#17: /proc/kcore, kallsyms addresses, keys, timer_list, debugfs, kmsg, /proc/1/stack."""
    results = shared_sb.attack("kernel_info")
    kc = one(results, "read_kcore")
    assert kc["ret"] <= 0, f"/proc/kcore readable: {kc}"
    ks = one(results, "read_kallsyms")
    assert ks.get("nonzero_addresses", 0) == 0, f"kernel addresses visible: {ks}"
    for r in pick(results, "read_kernel_file"):
        if r["path"] == "/proc/config.gz":
            continue  # the kernel config is public knowledge for a distribution kernel
        assert r["ret"] <= 0, f"{r['path']} readable: {r}"
    # control: host root does see kernel addresses (the check can fail)
    ctl = subprocess.run([str(attack_bin), "kernel_info"], capture_output=True, text=True, timeout=30)
    host = one(parse_results(ctl.stdout), "read_kallsyms")
    if os.path.exists("/proc/kallsyms") and _read("/proc/sys/kernel/kptr_restrict").strip() == "0":
        assert host["nonzero_addresses"] > 0, host


def test_sys_not_writable(shared_sb):
    """#15/#38: sysfs (power, THP, module parameters, PCI rescan) and cgroupfs release_agent/limits."""
    results = shared_sb.attack("sys_write")
    rs = pick(results, "sys_open_write")
    assert len(rs) >= 10, results
    opened = [r for r in rs if r["ret"] >= 0]
    assert not opened, f"sysfs/cgroupfs open for writing: {opened}"
    for name in ("sys_mkdir_cgroup", "sys_mkdir"):
        assert one(results, name)["ret"] < 0
