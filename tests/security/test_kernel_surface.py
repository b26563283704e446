"""THREATS B.3 (#20-#24, #26, #29, #30) and B.2 #18: kernel surface a root occupant reaches.

Every case runs `attack SUBCOMMAND` as root inside a real sandbox and asserts that each
attempt fails with the errno the policy promises.  The matching `test_control_*` runs the same
binary on the host in a weak sandbox (nobody, fresh user/mount/pid/net namespaces, no seccomp,
no capability drop, no Landlock) and asserts the attempt *works* there, i.e. that the
in-sandbox test is able to fail.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set

import pytest

from sec_util import denied, one, pick

# id -> (subcommand, attack names, errnos meaning "refused", control shows a difference)
CASES: Dict[str, tuple] = {
    "mount": ("mount", ["mount_tmpfs", "mount_proc", "mount_bind", "mount_remount_rw"], {"EPERM"}, True),
    "umount_masks": ("mount", ["umount2"], {"EPERM"}, False),
    "fsopen_fspick_fsconfig_fsmount": ("fsopen", ["fsopen", "fsopen_proc", "fspick", "fsconfig", "fsmount"],
                                       {"EPERM"}, True),
    "open_tree_move_mount_setattr": ("open_tree", ["open_tree", "open_tree_attr", "move_mount", "mount_setattr"],
                                     {"EPERM"}, True),
    "pivot_root": ("pivot_root", ["pivot_root"], {"EPERM"}, True),
    "unshare_newuser": ("unshare", ["unshare_0x10000000", "unshare_0x10020000", "unshare_0x50000000"],
                        {"EPERM"}, True),
    "unshare_other_namespaces": ("unshare_other", ["unshare_0x20000", "unshare_0x40000000", "unshare_0x4000000",
                                                   "unshare_0x8000000", "unshare_0x20000000", "unshare_0x2000000",
                                                   "unshare_0x80"], {"EPERM"}, True),
    "clone_newuser": ("clone_user", ["clone_newuser"], {"EPERM"}, True),
    "clone3_enosys": ("clone3", ["clone3"], {"ENOSYS"}, True),
    "setns": ("setns", ["setns"], {"EPERM"}, True),
    "bpf": ("bpf", ["bpf_map_create", "bpf_prog_load"], {"EPERM"}, False),
    "keyctl_add_key_request_key": ("keyctl", ["add_key", "keyctl", "request_key"], {"EPERM"}, True),
    "userfaultfd": ("userfaultfd", ["userfaultfd", "userfaultfd_user_mode"], {"EPERM"}, True),
    "perf_event_open": ("perf", ["perf_event_open"], {"EPERM"}, True),
    "io_uring": ("io_uring", ["io_uring_setup", "io_uring_enter", "io_uring_register"], {"EPERM"}, True),
    "kexec": ("kexec", ["kexec_load", "kexec_file_load"], {"EPERM"}, False),
    "modules": ("modules", ["init_module", "finit_module", "delete_module"], {"EPERM"}, False),
    "swapon_swapoff": ("swapon", ["swapon", "swapoff"], {"EPERM"}, False),
    "reboot": ("reboot", ["reboot"], {"EPERM"}, True),
    "clock_settime_settimeofday_adjtime": ("time", ["clock_settime", "settimeofday", "clock_adjtime", "adjtimex"],
                                           {"EPERM"}, True),
    "acct_syslog_quotactl_iopl": ("misc", ["acct", "syslog", "quotactl", "iopl", "ioperm"], {"EPERM"}, False),
    "oom_adj_rt_sched_nice_rlimits": ("misc", ["oom_score_adj_-1000", "sched_fifo", "nice_-20",
                                               "raise_hard_rlimit_nproc"], {"EPERM", "EACCES"}, False),
    "open_by_handle_at": ("open_by_handle", ["name_to_handle_at", "open_by_handle_at"], {"EPERM"}, True),
    "socket_af_packet": ("sockets", ["socket_packet"], {"EPERM"}, True),
    "socket_raw_inet": ("sockets", ["socket_raw"], {"EPERM"}, True),
    # AF_VSOCK datagram has no transport here (ENODEV without the filter): also refused.
    "socket_af_vsock": ("sockets", ["socket_vsock"], {"EPERM", "ENODEV"}, True),
    "ioctl_xfs_swapext_exchange_range": ("ioctl_xfs", ["ioctl_xfs"], {"EPERM"}, True),
}

# When the kernel itself lacks a facility (this host: no kexec, no modules, no ioperm/iopl),
# ENOSYS is as safe as the filter's EPERM; accepted only if the weak control got ENOSYS too.
ENOSYS_IF_ABSENT = {"kexec", "modules", "acct_syslog_quotactl_iopl"}


def _errnos_for(case: str, name: str, weak) -> Set[str]:
    sub, _, errnos, _ = CASES[case]
    errnos = set(errnos)
    if case in ENOSYS_IF_ABSENT:
        ctl = pick(weak(sub), name)
        if ctl and all(r.get("errno") == "ENOSYS" for r in ctl):
            errnos.add("ENOSYS")
    return errnos


@pytest.mark.parametrize("case", list(CASES))
def test_attack_refused(case, shared_sb, weak):
    sub, names, _, _ = CASES[case]
    results = shared_sb.attack(sub, timeout_s=60)
    assert results, f"attack {sub} printed nothing: {shared_sb.last!r}"
    failures = []
    for name in names:
        rs = [r for r in pick(results, name) if not r.get("high_bits")]  # see the upper-bits test
        if not rs:
            if case == "umount_masks" or name in ("raise_hard_rlimit_nproc", "open_by_handle_at"):
                continue  # attempt skipped when its precondition does not hold
            failures.append(f"{name}: no result")
            continue
        ok = _errnos_for(case, name, weak)
        for r in rs:
            if r.get("mountpoint") == 0 and denied(r, ok | {"EINVAL", "ENOENT"}):
                continue  # nothing mounted there: nothing to unmask or remount
            if not denied(r, ok):
                failures.append(f"{name}: {r} (expected ret -1 with {sorted(ok)})")
    assert not failures, "sandbox allowed:\n  " + "\n  ".join(failures)


@pytest.mark.parametrize("case", [c for c, v in CASES.items() if v[3]])
def test_control_attack_works_without_warren(case, weak):
    """Positive control: in a weak sandbox at least one attempt of the case succeeds (or is
    refused for a different reason), so the in-sandbox assertion is not vacuous."""
    sub, names, errnos, _ = CASES[case]
    results = weak(sub)
    got = [r for n in names for r in pick(results, n)]
    assert got, f"control printed nothing for {names}"
    assert any(not denied(r, errnos) for r in got), f"control is refused too: {got}"


def test_attack_umount_masks_control(weak):
    """Control for the umount case: the same unprivileged namespace root can mount and unmount."""
    rs = weak("mount")
    assert one(rs, "mount_tmpfs")["ret"] == 0, rs


# --------------------------------------------------------------------------
# filter gaps: garbage in the upper 32 bits of int arguments
# --------------------------------------------------------------------------
def test_socket_family_upper_bits_do_not_bypass(shared_sb, weak):
    """socket(2) takes an int family; the kernel drops the upper 32 bits of the register.  A
    seccomp rule that compares all 64 bits (`eq 40`) does not match `40 | 1<<32`, so AF_VSOCK
    (not network-namespaced: reaches the hypervisor's vsock services) would be created anyway."""
    results = shared_sb.attack("sockets")
    hi = [r for r in results if r.get("high_bits")]
    assert hi, results
    bad = [r for r in hi if not denied(r, {"EPERM", "ENODEV", "EACCES"})]
    assert not bad, "socket() with high bits in the family went through the filter: " + repr(bad)
    # control: the kernel really ignores the upper bits (the weak sandbox creates the socket)
    assert any(r["ret"] >= 0 for r in weak("sockets") if r.get("high_bits") and r["attack"] == "socket_vsock")


# --------------------------------------------------------------------------
# TIOCSTI, syscall ABIs, mknod
# --------------------------------------------------------------------------
def test_tiocsti_refused(shared_sb, weak):
    """THREATS #30: keystroke injection into a terminal (also with high bits in the request)."""
    results = shared_sb.attack("tiocsti")
    tty = one(results, "open_dev_tty")
    assert tty["ret"] < 0, f"the command has a controlling terminal shared with someone: {tty}"
    inj = pick(results, "tiocsti")
    setup = pick(results, "tiocsti_setup")
    assert inj or setup, results
    bad = [r for r in inj if not denied(r, {"EPERM"})]
    assert not bad, f"TIOCSTI went through: {bad}"
    # control: on an own pty as controlling terminal the injection works without the filter
    ctl = pick(weak("tiocsti"), "tiocsti")
    assert ctl and all(r["ret"] == 0 for r in ctl), ctl


def test_non_native_syscall_abis(shared_sb, weak):
    """A 32-bit `int $0x80` mount and an x32 mount must not run: the process is killed
    (SIGSYS from the filter's bad-arch action; SIGSEGV where the kernel itself refuses int
    0x80, which the host control shows) or the call fails."""
    results = shared_sb.attack("abi")
    m = one(results, "int80_mount")
    assert m["ret"] != 0, f"32-bit mount succeeded: {m}"
    ctl = one(weak("abi"), "int80_getpid")
    int80_works_on_host = ctl.get("ret", -1) > 0
    for name in ("int80_getpid", "int80_mount"):
        r = one(results, name)
        if int80_works_on_host:
            assert r.get("child_signal") == 31, f"{name}: expected SIGSYS, got {r}"
        else:
            assert r.get("child_signal") in (31, 11) or r["ret"] < 0, r
    x = one(results, "x32_mount")
    assert x["ret"] < 0, f"x32 mount: {x}"
    assert x.get("child_signal") == 31, f"x32 syscall not killed by the filter (SIGSYS): {x}"


def test_mknod_devices_unusable(shared_sb, weak):
    """THREATS #40: block/char device nodes cannot be made (or, if made, not opened)."""
    results = shared_sb.attack("mknod")
    rs = pick(results, "mknod")
    assert len(rs) == 6, results
    for r in rs:
        if r["ret"] == 0:
            assert r["use_read"] < 0, f"device node made and readable: {r}"
        else:
            assert r["errno"] in ("EPERM", "EACCES", "EROFS"), r
