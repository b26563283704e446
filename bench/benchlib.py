"""Pieces the benchmarks share: errors, signal handling, logging, percentiles, mount(2)."""

import ctypes
import ctypes.util
import os
import sys


class BenchError(Exception):
    pass


class Stopped(Exception):
    """Raised in the main thread by SIGTERM (SIGINT raises KeyboardInterrupt)."""


def _raise_stopped(signum, frame):
    raise Stopped(f"signal {signum}")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def percentile(sorted_vals, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_vals:
        return float("nan")
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    k = (len(sorted_vals) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                ctypes.c_ulong, ctypes.c_char_p]
        _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc.unshare.argtypes = [ctypes.c_int]
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong,
                                ctypes.c_ulong, ctypes.c_ulong]
    return _libc


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1


def sys_mount(src, target, fstype, flags=0, data=None):
    _check(libc().mount(src.encode() if src else None, target.encode(),
                        fstype.encode() if fstype else None, flags,
                        data.encode() if data else None), f"mount {target}")


def sys_umount(target, flags=0):
    _check(libc().umount2(target.encode(), flags), f"umount {target}")
