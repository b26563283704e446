"""Shell-level attacks with the image's busybox, run through the CLI (`warren exec`).

Each command is something a root occupant would type; each must fail, leave no effect, and
leave the sandbox working.  A fresh sandbox per case: a command that worked could break it.
"""

from __future__ import annotations

import pytest

from sec_util import healthy

# (id, command that must fail, shell check that must print "clean" afterwards)
CASES = [
    ("mount_tmpfs", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m", "grep -q ' /tmp/m ' /proc/self/mounts || echo clean"),
    ("mount_proc", "mkdir -p /tmp/p && mount -t proc proc /tmp/p", "grep -q ' /tmp/p ' /proc/self/mounts || echo clean"),
    ("remount_root_sys_rw", "mount -o remount,rw /sys", "grep -q ' /sys sysfs ro' /proc/self/mounts && echo clean"),
    ("umount_proc_mask", "umount /proc/keys || umount -l /proc/timer_list",
     "grep -q ' /proc/keys ' /proc/self/mounts && echo clean"),
    ("drop_caches", "echo 3 > /proc/sys/vm/drop_caches", "echo clean"),
    ("mknod_block", "mknod /tmp/sda b 8 0", "test -e /tmp/sda || echo clean"),
    ("unshare_user", "unshare -U -r true", "echo clean"),
    ("unshare_mount", "unshare -m true", "echo clean"),
    ("nsenter_pid1", "nsenter -t 1 -m -n true", "echo clean"),
    ("read_pid1_environ", "cat /proc/1/environ", "echo clean"),
    ("swapon", "dd if=/dev/zero of=/tmp/swap bs=64k count=16 2>/dev/null && mkswap /tmp/swap >/dev/null && swapon /tmp/swap",
     "grep -q /tmp/swap /proc/swaps || echo clean"),
    ("dmesg", "dmesg | head -1 | grep .", "echo clean"),
    ("insmod", "echo x > /tmp/x.ko && insmod /tmp/x.ko", "echo clean"),
    ("ip_addr_add", "ip addr add 10.99.0.1/24 dev lo", "ip addr show lo | grep -q 10.99.0.1 || echo clean"),
    ("ip_link_up_down", "ip link set lo down", "ip link show lo | grep -q UP && echo clean"),
    ("ping_raw_icmp", "ping -c 1 -W 1 127.0.0.1", "echo clean"),
    ("oom_score_adj_immune", "echo -1000 > /proc/self/oom_score_adj", "echo clean"),
    ("raise_hard_nofile", "ulimit -n 1048576", "echo clean"),
    ("reboot", "reboot -f", "echo clean"),
    ("chroot_to_proc1_root", "chroot /proc/1/root /bin/true", "echo clean"),
    ("write_etc_through_proc1_root", "echo pwned > /proc/1/root/tmp/pwned",
     "test -e /tmp/pwned || echo clean"),
]


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_shell_attack(case, make_sandbox, server):
    _, cmd, check = next(c for c in CASES if c[0] == case)
    sb = make_sandbox(install=False)
    r = server.cli("exec", sb.id, "--timeout", "30", "--", "/bin/sh", "-c", cmd, timeout=90)
    assert r.returncode != 0, f"`{cmd}` succeeded in the sandbox:\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert r.returncode not in (124,), f"`{cmd}` hung until the timeout"
    assert r.returncode != 127, f"`{cmd}`: a tool is missing from the image, the case proves nothing: {r.stderr}"
    after = sb.sh(check, timeout_s=30)
    assert "clean" in after["stdout"], f"`{cmd}` left an effect: {after}"
    assert sb.alive(), f"the sandbox stopped answering after `{cmd}`"
    assert healthy(server)
