"""Integrity against reward hacking (issue 23): what a root occupant must not be able to change.

1. Tool layers are immutable: every file a tool layer brings stays as built, whatever root in
   the sandbox tries (writes, metadata, renames and links over it, O_TMPFILE, moving its
   ancestor directories aside, inode flags, mounts), while the base's files in the same
   directories stay writable.
2. A filesystem policy (`filesystem` at create, PUT /v1/sandboxes/{id}/filesystem) makes
   trees read-only for every process, including processes started before the change and
   descriptors, mappings and working directories they hold; going back makes them writable.
3. The tamper report (GET /v1/sandboxes/{id}/changes) lists every change relative to the
   layers, including the ones made to look like nothing happened.
4. /sys/firmware (and /sys/devices/virtual/powercap, /proc/asound where the host has them)
   are empty read-only directories.

The attacks run inside real sandboxes as a static C program (integrity_probe.c: one JSON line
per system call and a summary per attempt).  After each attack a fresh process reads the
protected files back; each battery also runs against copies the occupant may change, so a
probe that could not do anything anywhere would fail the test instead of passing it.

Run as root from the repository root:
    /usr/bin/python3 -m pytest -q tests/security/test_integrity.py
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

import e2e_util as u
from sec_util import Sandbox, parse_results

HERE = Path(__file__).resolve().parent
IPROBE_SRC = HERE / "integrity_probe.c"
IPROBE = "/usr/local/bin/integrity_probe"

# The e2e conftest, as tests/security/conftest.py loaded it (its helpers, not its fixtures).
_e2e = sys.modules["warren_e2e_conftest"]

BASE = "itg-base:1"
TOOL = "itg-grader:1"
WS = "itg-ws:1"

FAKE = "#!/bin/sh\necho HACKED\n"

# The tool layer: a grader under /opt/tools, and tool files in directories the base has too.
TOOL_FILES = {
    "opt/tools/grader/bin/grade": "#!/bin/sh\necho grade-ok-v1\ncat /opt/tools/grader/share/expected.txt\n",
    "opt/tools/grader/share/expected.txt": "expected-v1\n",
    "bin/grade": "#!/bin/sh\necho bin-grade-v1\n",
    "usr/bin/grade-helper": "#!/bin/sh\necho helper-v1\n",
    "etc/graderconf": "conf-v1\n",
    # A directory no base of these tests has: the tool's own, read-only whole.
    "srv/grader-data/ref.txt": "ref-v1\n",
}
# What running the tools prints, as built.
TOOL_RUN = ("/opt/tools/grader/bin/grade; /bin/grade; /usr/bin/grade-helper; "
            "cat /etc/graderconf /srv/grader-data/ref.txt")
TOOL_OUTPUT = "grade-ok-v1\nexpected-v1\nbin-grade-v1\nhelper-v1\nconf-v1\nref-v1\n"
# Every path the tool layer brings (directories of its own and files).
TOOL_PATHS = ["/opt/tools/grader", "/opt/tools/grader/bin", "/opt/tools/grader/bin/grade",
              "/opt/tools/grader/share", "/opt/tools/grader/share/expected.txt",
              "/bin/grade", "/usr/bin/grade-helper", "/etc/graderconf",
              "/srv", "/srv/grader-data", "/srv/grader-data/ref.txt"]

# The base of the tool tests: the busybox rootfs, plus /opt and /opt/tools of its own (so the
# tool shares them and they must stay writable) and files there to change.
BASE_EXTRA = {
    "opt/base.txt": "base-opt\n",
    "opt/tools/README": "base-tools\n",
    "usr/bin/base-ctl": "base-usr-bin\n",
    "bin/base-ctl": "base-bin\n",
}

# The workspace of the tamper-report test.
WS_FILES = {
    "work/task.txt": "task-v1\n",
    "work/delete-me.txt": "delete me\n",
    "work/tests/test_a.txt": "assert a\n",
    "work/tests/test_b.txt": "assert b\n",
    "work/dirB/inner.txt": "inner\n",
}


# --------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def iprobe_bin(bin_dir) -> Path:
    out = bin_dir / "integrity_probe"
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.fail("gcc not found (apt-get install gcc libc6-dev)")
    r = subprocess.run([gcc, "-static", "-O2", "-Wall", "-o", str(out), str(IPROBE_SRC)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"gcc -static {IPROBE_SRC} failed:\n{r.stderr}")
    os.chmod(out, 0o755)
    return out


def _fix_times(root: str) -> None:
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_700_000_000, 1_700_000_000), follow_symlinks=False)
    os.utime(root, (1_700_000_000, 1_700_000_000))


def _write_tree(root: str, files: Dict[str, str]) -> None:
    for rel, text in files.items():
        p = Path(root) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        os.chmod(p, 0o755 if text.startswith("#!") else 0o644)


@pytest.fixture(scope="module")
def layers(server, image):
    """Builds the base, tool and workspace layers of this module (removed afterwards)."""
    made: List[str] = []
    refs: List[str] = []

    def build(ref: str, kind: str, files: Dict[str, str], busybox: bool = False) -> str:
        root = tempfile.mkdtemp(prefix="warren-itg-layer-", dir=_e2e._scratch_base())
        made.append(root)
        os.chmod(root, 0o755)
        if busybox:
            _e2e._build_rootfs(Path(root))
        _write_tree(root, files)
        _fix_times(root)
        r = server.cli("image", "build", ref, "--from-dir", root, "--kind", kind, timeout=300)
        assert r.returncode == 0, f"image build {ref}: {r.stdout}\n{r.stderr}"
        refs.append(ref)
        return r.stdout.split()[1]

    try:
        build(BASE, "base", BASE_EXTRA, busybox=True)
        build(TOOL, "tool", TOOL_FILES)
        build(WS, "workspace", WS_FILES)
        yield {"base": BASE, "tool": TOOL, "workspace": WS}
    finally:
        for ref in refs:
            server.cli("image", "rm", ref)
        for root in made:
            _e2e.safe_rmtree(root)


@pytest.fixture
def new_sb(server, image, sandboxes, iprobe_bin):
    """new_sb(**spec) -> Sandbox (base `t:1` unless `image` is given) with the probe at IPROBE."""
    data = iprobe_bin.read_bytes()

    def make(**spec) -> Sandbox:
        body = {"image": image}
        body.update(spec)
        r = server.http("POST", "/v1/sandboxes", body, timeout=120)
        assert r.status == 201, f"create {body!r}: {r!r}"
        sb = Sandbox(server, r.json["id"])
        sandboxes.append(sb.id)
        res = sb.exec(["/bin/mkdir", "-p", "/usr/local/bin"], timeout_s=20)
        assert res["exit_code"] == 0, res
        w = sb.put(IPROBE, data, mode="0755")
        assert w.status == 204, f"upload {IPROBE}: {w!r}"
        return sb
    return make


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def probe(sb: Sandbox, *cmds: Sequence[str], timeout_s: float = 60) -> List[dict]:
    """Runs integrity_probe with the commands (joined by `--`) in a new process; its lines."""
    argv = [IPROBE]
    for i, c in enumerate(cmds):
        if i:
            argv.append("--")
        argv += list(c)
    res = sb.exec(argv, timeout_s=timeout_s)
    assert res["exit_code"] == 0, f"integrity_probe {argv[1:]!r}: {res!r}"
    return parse_results(res.get("stdout") or "")


def ends(lines: List[dict]) -> List[dict]:
    return [l for l in lines if l.get("op") == "end"]


def attempt(sb: Sandbox, cmd: Sequence[str]) -> Tuple[dict, List[dict]]:
    """One command: (its summary line, its step lines)."""
    lines = probe(sb, cmd)
    e = ends(lines)
    assert len(e) == 1, f"{cmd!r}: no summary in {lines!r}"
    return e[0], [l for l in lines if l.get("op") != "end"]


def stats(sb: Sandbox, paths: Sequence[str]) -> Dict[str, dict]:
    """What a new process sees at each path (contents, mode, owner, times, flags, xattrs)."""
    lines = probe(sb, ["stat", *paths])
    out = {l["path"]: l for l in lines if l.get("op") == "stat"}
    assert set(out) == set(paths), f"stat {paths!r}: {lines!r}"
    return out


def sh_ok(sb: Sandbox, cmd: str) -> str:
    res = sb.sh(cmd, timeout_s=60)
    assert res["exit_code"] == 0, f"sh -c {cmd!r}: {res!r}"
    return res["stdout"]


def tool_state(sb: Sandbox) -> Tuple[Dict[str, dict], str]:
    """One new process: the tool's files as stat sees them, and what running the tools prints."""
    res = sb.sh(f"{IPROBE} stat {' '.join(TOOL_PATHS)}; {TOOL_RUN}", timeout_s=60)
    out = res.get("stdout") or ""
    st = {l["path"]: l for l in parse_results(out) if l.get("op") == "stat"}
    ran = "".join(line + "\n" for line in out.splitlines() if not line.startswith("{"))
    return st, ran


def diff_state(before: Dict[str, dict], after: Dict[str, dict]) -> List[str]:
    out = []
    for p in sorted(set(before) | set(after)):
        b, a = before.get(p), after.get(p)
        if b != a:
            out.append(f"{p}: was {b!r}, now {a!r}")
    return out


def put_fs(server, sid: str, body) -> u.Response:
    return server.http("PUT", f"/v1/sandboxes/{sid}/filesystem", body, timeout=120)


def set_fs(server, sb: Sandbox, body) -> dict:
    r = put_fs(server, sb.id, body)
    assert r.status == 200, f"PUT filesystem {body!r}: {r!r}"
    return r.json


def hexpath(p: str) -> str:
    return p.encode().hex()


# --------------------------------------------------------------------------
# 1. tool layers are immutable
# --------------------------------------------------------------------------
# Each tool file attacked: (the file, its directory, a writable directory next to it where the
# occupant makes its fakes).
TOOL_TARGETS = [
    ("/opt/tools/grader/bin/grade", "/opt/tools/grader/bin", "/opt/tools"),
    ("/opt/tools/grader/share/expected.txt", "/opt/tools/grader/share", "/opt/tools"),
    ("/bin/grade", "/bin", "/bin"),
    ("/usr/bin/grade-helper", "/usr/bin", "/usr/bin"),
    ("/etc/graderconf", "/etc", "/etc"),
]


def file_attacks(t: str, d: str, w: str, fake: str, fake_tmp: str) -> List[Tuple[str, List[str], bool]]:
    """Attacks on file `t` in directory `d`, with a fake made in the writable directory `w`
    (or in /tmp): (name, probe command, whether the attack has a positive control, i.e. the
    same on a copy of `t` in `w` must work)."""
    return [
        ("write", ["write", t, FAKE], True),
        ("append", ["append", t, FAKE], True),
        ("truncate", ["truncate", t, "0"], True),
        ("chmod", ["chmod", t, "777"], True),
        ("chown", ["chown", t, "1000", "1000"], True),
        ("setxattr", ["setxattr", t, "user.hacked", "1"], True),
        ("utimes", ["utimes", t], True),
        ("setflags", ["setflags", t, "set", "40"], True),  # FS_NODUMP_FL: needs no capability
        ("unlink", ["unlink", t], True),
        ("rename-away", ["rename", t, t + ".moved"], True),
        ("link-out", ["link", t, fake + ".alias"], True),
        ("rename-over", ["rename", fake, t], True),
        ("rename-over-from-tmp", ["rename", fake_tmp, t], False),
        ("exchange", ["exchange", fake, t], True),
        ("link-over", ["linkover", fake, t], True),
        ("symlink-over", ["symlinkover", fake, t], True),
        ("tmpfile-in-its-dir", ["tmpfile", d, t, FAKE], True),
        ("tmpfile-next-to-it", ["tmpfile", w, t, FAKE], True),
        ("tmpfile-in-tmp", ["tmpfile", "/tmp", t, FAKE], False),
    ]


@pytest.fixture
def tool_sb(new_sb, layers):
    """A sandbox of the base with /opt, and the grader tool; its state as built, checked."""
    sb = new_sb(image=BASE, tools=[TOOL])
    st, ran = tool_state(sb)
    assert ran == TOOL_OUTPUT, f"the tool does not run as built in a new sandbox: {ran!r}"
    assert set(st) == set(TOOL_PATHS), st
    for rel, text in TOOL_FILES.items():
        assert st["/" + rel]["data"] == text.encode().hex(), st["/" + rel]
    return sb, st


def test_tool_files_cannot_be_changed_replaced_or_shadowed(tool_sb):
    sb, built = tool_sb
    failures: List[str] = []
    for n, (t, d, w) in enumerate(TOOL_TARGETS):
        fake_tmp = f"/tmp/fake-{n}"
        count = len(file_attacks(t, d, w, "", fake_tmp))
        # A fake for every attack (each may consume its own), and for the positive controls a
        # copy of the target and a fake of their own.
        setup = [f"printf '{FAKE}' > {fake_tmp}", f"chmod 755 {fake_tmp}"]
        for i in range(count):
            setup += [f"printf '{FAKE}' > {w}/.fake-{n}-{i}", f"chmod 755 {w}/.fake-{n}-{i}",
                      f"cp {t} {w}/.ctl-{n}-{i}", f"printf '{FAKE}' > {w}/.cfake-{n}-{i}"]
        sh_ok(sb, " && ".join(setup))
        controls = []
        for i in range(count):
            name, cmd, control = file_attacks(t, d, w, f"{w}/.fake-{n}-{i}", fake_tmp)[i]
            summary, steps = attempt(sb, cmd)
            what = f"{name} on {t} ({' '.join(cmd)})"
            if summary["ok"]:
                failures.append(f"{what}: every step worked: {steps!r}")
            st, ran = tool_state(sb)
            if ran != TOOL_OUTPUT:
                failures.append(f"{what}: the tools now print {ran!r}")
            changed = diff_state(built, st)
            if changed:
                failures.append(f"{what}: the tool layer changed: " + "; ".join(changed))
            if control:
                cname, ccmd, _ = file_attacks(f"{w}/.ctl-{n}-{i}", w, w, f"{w}/.cfake-{n}-{i}", fake_tmp)[i]
                controls.append((cname, ccmd))
        # Positive controls: the same attempts on a copy next to it all work.
        lines = probe(sb, *[c for _, c in controls])
        assert len(ends(lines)) == len(controls), lines
        for (name, ccmd), e in zip(controls, ends(lines)):
            if not e["ok"]:
                failures.append(f"control {name} ({' '.join(ccmd)}) failed on a file the occupant owns: {e!r}")
    assert not failures, "\n".join(failures)


def test_tool_files_cannot_be_shadowed_by_a_mount(tool_sb):
    sb, built = tool_sb
    sh_ok(sb, f"mkdir -p /tmp/fakedir && printf '{FAKE}' > /tmp/fakefile && chmod 755 /tmp/fakefile")
    failures = []
    for target, src in (("/opt/tools/grader/bin/grade", "/tmp/fakefile"), ("/bin/grade", "/tmp/fakefile"),
                        ("/opt/tools/grader", "/tmp/fakedir"), ("/opt/tools/grader/bin", "/tmp/fakedir"),
                        ("/opt/tools", "/tmp/fakedir"), ("/opt", "/tmp/fakedir")):
        summary, steps = attempt(sb, ["mount-over", target, src])
        worked = [s for s in steps if s["ret"] >= 0]
        if worked:
            failures.append(f"mount over {target}: {worked!r}")
        st, ran = tool_state(sb)
        if ran != TOOL_OUTPUT or diff_state(built, st):
            failures.append(f"after mount attempts on {target}: tools print {ran!r}; {diff_state(built, st)}")
    assert not failures, "\n".join(failures)


# The directories above the tool's files: the base has them too, so they are pinned (writable,
# never renamed or removed).
PINNED = ["/opt/tools", "/opt", "/bin", "/usr/bin", "/usr", "/etc"]


def test_tool_ancestors_cannot_be_moved_aside(tool_sb):
    sb, built = tool_sb
    failures = []

    def check(what):
        st, ran = tool_state(sb)
        if ran != TOOL_OUTPUT:
            failures.append(f"{what}: the tools now print {ran!r}")
        changed = diff_state(built, st)
        if changed:
            failures.append(f"{what}: the tool layer changed: " + "; ".join(changed))

    # Fake trees, ready to be swapped in: one in /, and one beside each pinned directory.
    sh_ok(sb, "mkdir -p /fake/tools/grader/bin && "
              f"printf '{FAKE}' > /fake/tools/grader/bin/grade && chmod 755 /fake/tools/grader/bin/grade")
    for a in PINNED + ["/opt/tools/grader"]:
        sh_ok(sb, f"mkdir -p {os.path.dirname(a)}/.swap-{os.path.basename(a)}/bin")
    for a in PINNED:
        swap = f"{os.path.dirname(a)}/.swap-{os.path.basename(a)}".replace("//", "/")
        for cmd, errno in ((["rename", a, a + "-moved"], "EBUSY"), (["rmdir", a], "EBUSY"),
                           (["exchange", swap, a], "EBUSY"), (["rename", swap, a], "EBUSY")):
            summary, steps = attempt(sb, cmd)
            if summary["ok"] or summary.get("errno") != errno:
                failures.append(f"{' '.join(cmd)} on a pinned directory: expected {errno}, got {steps!r}")
            check(" ".join(cmd))
    # The overlay's own xattrs (opaque, redirect) set on the directories above: still the tool.
    for a in PINNED + ["/opt/tools/grader"]:
        for name, value in (("user.overlay.opaque", "y"), ("user.overlay.redirect", "/fake")):
            attempt(sb, ["setxattr", a, name, value])
            check(f"setxattr {a} {name}")
    for a in ("/opt/tools/grader", "/opt/tools/grader/bin", "/opt/tools/grader/share"):
        for cmd in (["rename", a, a + "-moved"], ["rename", a, "/tmp/moved"], ["rmdir", a],
                    ["exchange", "/fake/tools/grader", a], ["rename", "/fake/tools/grader", a],
                    ["exchange", "/opt/tools/.swap-grader", a], ["rename", "/opt/tools/.swap-grader", a]):
            summary, steps = attempt(sb, cmd)
            if summary["ok"]:
                failures.append(f"{' '.join(cmd)}: worked: {steps!r}")
            check(" ".join(cmd))
    # The whole attack, as a script would do it.
    for script in (
        "mv /opt /opt2; mkdir -p /opt/tools/grader/bin; "
        f"printf '{FAKE}' > /opt/tools/grader/bin/grade; chmod 755 /opt/tools/grader/bin/grade",
        "mv /opt/tools /opt/tools2; mkdir -p /opt/tools/grader/bin; "
        f"printf '{FAKE}' > /opt/tools/grader/bin/grade; chmod 755 /opt/tools/grader/bin/grade",
        "mv /opt/tools/grader /opt/tools/grader2; mkdir -p /opt/tools/grader/bin; "
        f"printf '{FAKE}' > /opt/tools/grader/bin/grade; chmod 755 /opt/tools/grader/bin/grade",
        "mv /opt/tools/grader/bin /opt/tools/grader/bin2; mkdir -p /opt/tools/grader/bin; "
        f"printf '{FAKE}' > /opt/tools/grader/bin/grade",
        f"mv /usr/bin /usr/bin2; mkdir -p /usr/bin; printf '{FAKE}' > /usr/bin/grade-helper",
        "rm -rf /opt/tools/grader",
        "rm -rf /opt/tools/grader/bin/grade /etc/graderconf /usr/bin/grade-helper",
    ):
        sb.sh(script, timeout_s=60)
        check(script)
    for a in ("/opt", "/opt/tools", "/opt/tools/grader", "/usr/bin"):
        res = sb.sh(f"test -e {a}2", timeout_s=20)
        if res["exit_code"] == 0:
            failures.append(f"{a} was moved to {a}2")
    assert not failures, "\n".join(failures)


def test_base_files_next_to_tool_files_stay_writable(tool_sb):
    sb, built = tool_sb
    failures = []
    cmds = [
        ["create", "/opt/other", "x"], ["mkdir", "/opt/newdir"], ["create", "/opt/tools/other", "x"],
        ["mkdir", "/opt/tools/newtool"], ["create", "/bin/newfile", "x"], ["create", "/usr/bin/newfile", "x"],
        ["create", "/etc/newfile", "x"],
        # Files of the base in the pinned directories: changed, renamed, removed.
        ["write", "/opt/base.txt", "changed-opt\n"], ["write", "/etc/marker", "changed-marker\n"],
        ["write", "/opt/tools/README", "changed-tools\n"], ["chmod", "/etc/hostname", "600"],
        ["rename", "/usr/bin/base-ctl", "/usr/bin/base-ctl2"], ["unlink", "/bin/base-ctl"],
        # Directories under the pinned ones that the tool does not own: renamed, removed.
        ["rename", "/opt/newdir", "/opt/newdir2"], ["rmdir", "/opt/tools/newtool"],
    ]
    for cmd, e in zip(cmds, ends(probe(sb, *cmds))):
        if not e["ok"]:
            failures.append(f"{' '.join(cmd)}: {e!r}")
    got = stats(sb, ["/opt/base.txt", "/etc/marker", "/opt/tools/README", "/opt/other", "/usr/bin/newfile"])
    for p, text in (("/opt/base.txt", "changed-opt\n"), ("/etc/marker", "changed-marker\n"),
                    ("/opt/tools/README", "changed-tools\n"), ("/opt/other", "x"), ("/usr/bin/newfile", "x")):
        if got[p].get("data") != text.encode().hex():
            failures.append(f"{p} reads {got[p]!r}, not {text!r}")
    res = sb.sh("test -e /usr/bin/base-ctl2 && ! test -e /usr/bin/base-ctl && ! test -e /bin/base-ctl "
                "&& test -d /opt/newdir2 && ! test -e /opt/tools/newtool", timeout_s=20)
    if res["exit_code"] != 0:
        failures.append(f"renames/removals of base files did not show: {res!r}")
    st, ran = tool_state(sb)
    assert ran == TOOL_OUTPUT and not diff_state(built, st), (ran, diff_state(built, st))
    assert not failures, "\n".join(failures)


def test_tool_only_directories_are_read_only_and_opt_stays_open(new_sb, layers):
    # The busybox base has neither /opt nor /srv. The tool's /srv tree is its own: read-only
    # whole. /opt and /opt/tools, which every tool uses, stay open to the occupant (pinned).
    sb = new_sb(tools=[TOOL])
    built, ran = tool_state(sb)
    assert ran == TOOL_OUTPUT, ran
    failures = []
    for cmd in (["mkdir", "/srv/x"], ["create", "/srv/x", "x"], ["create", "/srv/grader-data/x", "x"],
                ["rename", "/srv", "/srv2"], ["rmdir", "/srv"], ["rename", "/srv/grader-data", "/srv/d2"],
                ["write", "/srv/grader-data/ref.txt", "x"], ["unlink", "/srv/grader-data/ref.txt"],
                ["rename", "/opt", "/opt2"], ["rmdir", "/opt"], ["rename", "/opt/tools", "/opt/tools2"],
                ["rmdir", "/opt/tools"], ["write", "/opt/tools/grader/bin/grade", FAKE]):
        summary, steps = attempt(sb, cmd)
        if summary["ok"]:
            failures.append(f"{' '.join(cmd)} worked: {steps!r}")
    for script in ("mv /srv /srv2; mkdir -p /srv/grader-data; printf 'ref-hacked\\n' > /srv/grader-data/ref.txt",
                   f"mv /opt /opt2; mkdir -p /opt/tools/grader/bin; printf '{FAKE}' > /opt/tools/grader/bin/grade; "
                   "chmod 755 /opt/tools/grader/bin/grade"):
        sb.sh(script, timeout_s=30)
        st, ran = tool_state(sb)
        if ran != TOOL_OUTPUT or diff_state(built, st):
            failures.append(f"{script}: the tool changed: {ran!r} {diff_state(built, st)}")
    # /opt and /opt/tools take the occupant's own files; the base's directories too.
    e = ends(probe(sb, ["mkdir", "/opt/x"], ["create", "/opt/tools/x", "x"], ["unlink", "/opt/tools/x"],
                   ["create", "/etc/newfile", "x"], ["create", "/bin/newfile", "x"]))
    if not all(x["ok"] for x in e):
        failures.append(f"creating files beside the tool failed: {e!r}")
    st, ran = tool_state(sb)
    if ran != TOOL_OUTPUT or diff_state(built, st):
        failures.append(f"the tool changed: {ran!r} {diff_state(built, st)}")
    assert not failures, "\n".join(failures)


# --------------------------------------------------------------------------
# 2. the filesystem policy
# --------------------------------------------------------------------------
EVAL_POLICY = {"read_only": ["/"], "writable": ["/tmp", "/work/out"]}

# Files of the read-only tree: two in the writable layer, one only in the base.
RO_TARGETS = [("/work/data/answer", "/work/data", True), ("/work/data/sub/deep", "/work/data/sub", True),
              ("/etc/marker", "/etc", False)]
RO_WATCH = ["/", "/etc", "/etc/marker", "/work", "/work/data", "/work/data/answer", "/work/data/sub",
            "/work/data/sub/deep", "/work/data/empty"]


def _setup_stage(sb: Sandbox) -> None:
    sh_ok(sb, "mkdir -p /work/data/sub /work/data/empty /work/out && "
              "printf 'answer-v1\\n' > /work/data/answer && printf 'deep-v1\\n' > /work/data/sub/deep && "
              "printf 'victim\\n' > /work/data/victim && printf 'linked-v1\\n' > /work/data/linked && "
              "printf 'mapped-v1\\n' > /work/data/mapped")


def policy_attacks(t: str, d: str, upper: bool, k: str) -> List[Tuple[str, List[str]]]:
    fake = f"/tmp/fake-{k}"
    out = [
        ("write", ["write", t, "HACKED\n"]),
        ("append", ["append", t, "HACKED\n"]),
        ("truncate", ["truncate", t, "0"]),
        ("chmod", ["chmod", t, "777"]),
        ("chown", ["chown", t, "1000", "1000"]),
        ("setxattr", ["setxattr", t, "user.hacked", "1"]),
        ("utimes", ["utimes", t]),
        ("unlink", ["unlink", t]),
        ("rename-away", ["rename", t, t + ".moved"]),
        ("rename-out", ["rename", t, f"/tmp/moved-{k}"]),
        ("rename-over", ["rename", fake, t]),
        ("exchange", ["exchange", fake, t]),
        ("link-out", ["link", t, f"/tmp/alias-{k}"]),
        ("link-over", ["linkover", fake, t]),
        ("symlink-over", ["symlinkover", fake, t]),
        ("tmpfile-in-its-dir", ["tmpfile", d, t, "HACKED\n"]),
        ("tmpfile-from-tmp", ["tmpfile", "/tmp", t, "HACKED\n"]),
        ("create-next-to", ["create", f"{d}/new-{k}", "x"]),
        ("mkdir-next-to", ["mkdir", f"{d}/newdir-{k}"]),
        ("symlink-next-to", ["symlink", "/tmp", f"{d}/sl-{k}"]),
    ]
    if upper:  # an inode of the writable layer: its immutable flag must stay on
        out.append(("clear-immutable", ["setflags", t, "clear", "10"]))
    return out


def test_policy_read_only_tree_resists_every_write(server, new_sb):
    sb = new_sb()
    _setup_stage(sb)
    r = set_fs(server, sb, {"writable": ["/work/out", "/tmp", "/tmp"], "read_only": ["/"]})
    assert r["filesystem"] == {"read_only": ["/"], "writable": ["/tmp", "/work/out"]}, r
    assert r["id"] == sb.id and r["state"] == "running", r
    got = server.http("GET", f"/v1/sandboxes/{sb.id}").json
    assert got["filesystem"] == {"read_only": ["/"], "writable": ["/tmp", "/work/out"]}, got
    before = stats(sb, RO_WATCH)
    for p in ("/work/data/answer", "/work/data/sub/deep", "/etc/marker"):
        assert before[p]["type"] == "file", before[p]

    failures: List[str] = []
    for n, (t, d, upper) in enumerate(RO_TARGETS):
        atts = policy_attacks(t, d, upper, str(n))
        sh_ok(sb, f"printf 'HACKED\\n' > /tmp/fake-{n}")
        for name, cmd in atts:
            summary, steps = attempt(sb, cmd)
            what = f"{name} on {t} ({' '.join(cmd)})"
            if summary["ok"] or summary.get("errno") != "EPERM":
                failures.append(f"{what}: expected EPERM, got {steps!r}")
            now = stats(sb, RO_WATCH)
            changed = diff_state(before, now)
            if changed:
                failures.append(f"{what}: the read-only tree changed: " + "; ".join(changed))
                before = now  # report each change once
    # Positive controls: each attack on a copy in a writable tree (/work/out) works.
    controls = [c for c in policy_attacks("/work/out/ctl", "/work/out", True, "c") if c[0] != "clear-immutable"]
    setup = []
    for i in range(len(controls)):
        setup += [f"cp /work/data/answer /work/out/ctl-{i}", f"printf 'HACKED\\n' > /tmp/fake-c{i}"]
    sh_ok(sb, " && ".join(setup))
    cmds = [policy_attacks(f"/work/out/ctl-{i}", "/work/out", True, f"c{i}")[i][1] for i in range(len(controls))]
    for (name, _), cmd, e in zip(controls, cmds, ends(probe(sb, *cmds))):
        if not e["ok"]:
            failures.append(f"control {name} ({' '.join(cmd)}) failed in the writable tree: {e!r}")

    # Directories of the read-only tree, and entries of `/` (the writable trees' included).
    for cmd, errno in ((["rmdir", "/work/data/empty"], "EPERM"),
                       (["rename", "/work/data/sub", "/tmp/sub-moved"], "EPERM"),
                       (["rename", "/work/data/sub", "/work/data/sub2"], "EPERM"),
                       (["rename", "/work/data", "/work/data2"], "EPERM"),
                       (["rename", "/work/out", "/work/out2"], "EPERM"),
                       (["rename", "/tmp", "/tmp2"], "EPERM"),
                       (["rename", "/etc", "/etc2"], "EPERM"),
                       (["mkdir", "/newdir"], "EPERM"),
                       (["create", "/newfile", "x"], "EPERM"),
                       (["setflags", "/work/data", "clear", "10"], "EPERM"),
                       (["chmod", "/work/data", "777"], "EPERM")):
        summary, steps = attempt(sb, cmd)
        if summary["ok"] or summary.get("errno") != errno:
            failures.append(f"{' '.join(cmd)}: expected {errno}, got {steps!r}")
        now = stats(sb, RO_WATCH)
        changed = diff_state(before, now)
        if changed:
            failures.append(f"{' '.join(cmd)}: the read-only tree changed: " + "; ".join(changed))
            before = now
    # Mounting over the tree is no way around it either.
    summary, steps = attempt(sb, ["mount-over", "/work/data", "/tmp"])
    if [s for s in steps if s["ret"] >= 0]:
        failures.append(f"mount over /work/data: {steps!r}")

    # The writable trees are writable, the read-only one shows what it held.
    e = ends(probe(sb, ["create", "/tmp/ok", "x"], ["create", "/work/out/ok", "x"], ["mkdir", "/work/out/d"],
                   ["create", "/work/out/d/f", "x"], ["rename", "/work/out/d/f", "/tmp/f"]))
    if not all(x["ok"] for x in e):
        failures.append(f"the writable trees are not writable: {e!r}")
    res = sb.exec(["/bin/cat", "/work/data/answer", "/work/data/sub/deep", "/etc/marker"], timeout_s=20)
    if res["stdout"] != "answer-v1\ndeep-v1\nwarren-e2e-rootfs\n":
        failures.append(f"the read-only files read {res!r}")
    assert not failures, "\n".join(failures)


def test_policy_ancestors_of_a_read_only_tree_cannot_be_moved_aside(server, new_sb):
    sb = new_sb()
    _setup_stage(sb)
    set_fs(server, sb, {"read_only": ["/work/data"]})
    watch = ["/work/data", "/work/data/answer", "/work/data/sub", "/work/data/sub/deep"]
    before = stats(sb, watch)
    sh_ok(sb, "mkdir -p /fake/data && printf 'HACKED\\n' > /fake/data/answer")
    failures = []
    for cmd in (["rename", "/work", "/work2"], ["exchange", "/fake", "/work"], ["rmdir", "/work"],
                ["rename", "/work/data", "/work/data2"], ["exchange", "/fake/data", "/work/data"],
                ["rename", "/work/data", "/tmp/data"]):
        summary, steps = attempt(sb, cmd)
        if summary["ok"]:
            failures.append(f"{' '.join(cmd)} worked: {steps!r}")
    for script in ("mv /work /work2; mkdir -p /work/data; printf 'HACKED\\n' > /work/data/answer",
                   "mv /work/data /work/data2; mkdir -p /work/data; printf 'HACKED\\n' > /work/data/answer",
                   "rm -rf /work"):
        sb.sh(script, timeout_s=30)
        now = stats(sb, watch)
        if diff_state(before, now):
            failures.append(f"{script}: " + "; ".join(diff_state(before, now)))
    # /work itself, beside the tree, stays writable.
    e = ends(probe(sb, ["create", "/work/other", "x"], ["mkdir", "/work/newdir"], ["unlink", "/work/other"]))
    if not all(x["ok"] for x in e):
        failures.append(f"/work beside the read-only tree is not writable: {e!r}")
    out = sb.exec(["/bin/cat", "/work/data/answer"], timeout_s=20)["stdout"]
    if out != "answer-v1\n":
        failures.append(f"/work/data/answer reads {out!r}")
    assert not failures, "\n".join(failures)


def _start(server, sb: Sandbox, argv: List[str], timeout_s: float = 120) -> str:
    r = server.http("POST", f"/v1/sandboxes/{sb.id}/exec", {"argv": argv, "wait": False, "timeout_s": timeout_s})
    assert r.status == 202, f"async exec {argv!r}: {r!r}"
    return r.json["exec_id"]


def _wait_exists(server, sb: Sandbox, path: str, exec_id: str, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while True:
        if sb.sh(f"test -e {path}", timeout_s=10)["exit_code"] == 0:
            return
        assert time.time() < deadline, (f"{path} did not appear in {timeout}s: "
                                        f"{server.http('GET', f'/v1/sandboxes/{sb.id}/execs/{exec_id}').json!r}")
        time.sleep(0.05)


def _wait_exec(server, sb: Sandbox, exec_id: str, timeout: float = 60) -> dict:
    deadline = time.time() + timeout
    while True:
        res = server.http("GET", f"/v1/sandboxes/{sb.id}/execs/{exec_id}").json
        if res.get("state") == "exited":
            return res
        assert time.time() < deadline, f"exec {exec_id} still runs after {timeout}s: {res!r}"
        time.sleep(0.05)


def test_policy_binds_descriptors_mappings_and_cwds_opened_before(server, new_sb):
    sb = new_sb()
    _setup_stage(sb)
    # Setup stage: a process opens the answer for writing, maps it shared, holds the tree's
    # directory and works in it; a hard link to a file of the tree waits in /tmp.
    sh_ok(sb, "ln /work/data/linked /tmp/alias")
    exec_id = _start(server, sb, [IPROBE, "hold", "/work/data/answer", "/work/data", "/tmp/ready", "/tmp/go",
                                  "/work/data/sub/deep", "/work/data/mapped"])
    # Positive control: the same holder on a copy in /tmp, which stays writable.
    sh_ok(sb, "mkdir /tmp/ctl && cp /work/data/answer /work/data/victim /work/data/mapped /tmp/ctl/ && "
              "cp /work/data/sub/deep /tmp/ctl/deep")
    ctl_id = _start(server, sb, [IPROBE, "hold", "/tmp/ctl/answer", "/tmp/ctl", "/tmp/ready-ctl", "/tmp/go",
                                 "/tmp/ctl/deep", "/tmp/ctl/mapped"])
    _wait_exists(server, sb, "/tmp/ready", exec_id)
    _wait_exists(server, sb, "/tmp/ready-ctl", ctl_id)
    # Evaluation stage.
    r = set_fs(server, sb, {"read_only": ["/"], "writable": ["/tmp"]})
    assert r["filesystem"] == {"read_only": ["/"], "writable": ["/tmp"]}, r
    sh_ok(sb, "touch /tmp/go")
    res = _wait_exec(server, sb, exec_id)
    assert res["exit_code"] == 0, res
    ctl = _wait_exec(server, sb, ctl_id)
    ctl_lines = {l["op"]: l for l in parse_results(ctl["stdout"])}
    ops = ("fd_pwrite", "mmap_only_write", "mmap_write", "proc_reopen", "proc_reopen_ro", "ro_fchmod", "dirfd_fchmod",
           "cwd_create", "dirfd_create", "dirfd_mkdir", "dirfd_rename", "fd_ftruncate")
    worked = [op for op in ops if ctl_lines.get(op, {}).get("ret", -1) >= 0]
    assert len(worked) == len(ops), f"the control holder in /tmp could not do everything: {ctl!r}"
    cst = stats(sb, ["/tmp/ctl/answer", "/tmp/ctl/deep", "/tmp/ctl/mapped", "/tmp/ctl"])
    assert cst["/tmp/ctl/answer"]["data"] == "", cst  # its last act: ftruncate(fd, 0)
    assert bytes.fromhex(cst["/tmp/ctl/deep"]["data"]).startswith(b"HACKED-RO"), cst
    assert bytes.fromhex(cst["/tmp/ctl/mapped"]["data"]).startswith(b"HACKED-M2"), cst
    assert sorted(cst["/tmp/ctl"]["data"]) == ["answer", "cwd-new", "deep", "dirfd-dir", "dirfd-new", "mapped",
                                               "victim2"], cst
    lines = {l["op"]: l for l in parse_results(res["stdout"])}
    for op in ("open_rdonly", "open_mapfile", "mmap_only", "open_rdwr", "mmap_shared", "open_dir", "chdir",
               "ready", "go"):
        assert lines.get(op, {}).get("ret", -1) >= 0, f"the holder could not {op} before the change: {res!r}"
    failures = []
    # Through paths, the held descriptor or the cwd: EPERM.
    for op in ("proc_reopen", "proc_reopen_ro", "ro_fchmod", "dirfd_fchmod", "cwd_create", "dirfd_create", "dirfd_mkdir", "dirfd_rename", "cwd_unlink"):
        l = lines.get(op)
        if l is None or l["ret"] >= 0 or l["errno"] != "EPERM":
            failures.append(f"{op} after the change: expected EPERM, got {l!r}")
    # Writes through what was opened before land nowhere a new process can see.
    got = stats(sb, ["/work/data/answer", "/work/data/victim", "/work/data", "/work/data/linked",
                     "/work/data/sub/deep", "/work/data/mapped"])
    if got["/work/data/mapped"].get("data") != b"mapped-v1\n".hex():
        failures.append(f"/work/data/mapped changed through a shared mapping made before (its fd closed): "
                        f"{got['/work/data/mapped']!r} (holder: {lines.get('mmap_only_write')!r})")
    if got["/work/data/sub/deep"].get("mode") != 0o644 or got["/work/data"].get("mode") != 0o755:
        failures.append(f"modes changed through held fds: {got['/work/data/sub/deep']!r} {got['/work/data']!r}")
    if got["/work/data/sub/deep"].get("data") != b"deep-v1\n".hex():
        failures.append(f"/work/data/sub/deep changed through a reopen of a read-only fd: {got['/work/data/sub/deep']!r}")
    if got["/work/data/answer"].get("data") != b"answer-v1\n".hex():
        failures.append(f"/work/data/answer changed through the held fd or mapping: {got['/work/data/answer']!r} "
                        f"(holder: {lines.get('fd_pwrite')!r} {lines.get('mmap_write')!r})")
    if got["/work/data/victim"].get("data") != b"victim\n".hex():
        failures.append(f"/work/data/victim: {got['/work/data/victim']!r}")
    if sorted(got["/work/data"].get("data") or []) != ["answer", "empty", "linked", "mapped", "sub", "victim"]:
        failures.append(f"/work/data holds {got['/work/data'].get('data')!r}")
    # Through a hard link made before, from the writable tree.
    sb.exec([IPROBE, "write", "/tmp/alias", "HACKED\n"], timeout_s=20)
    sb.exec([IPROBE, "append", "/tmp/alias", "HACKED\n"], timeout_s=20)
    if stats(sb, ["/work/data/linked"])["/work/data/linked"].get("data") != b"linked-v1\n".hex():
        failures.append("/work/data/linked changed through a hard link in /tmp made before the change")
    # A new writer now: EPERM.
    summary, steps = attempt(sb, ["write", "/work/data/answer", "HACKED\n"])
    if summary["ok"] or summary.get("errno") != "EPERM":
        failures.append(f"write after the change: {steps!r}")
    out = sb.exec(["/bin/cat", "/work/data/answer"], timeout_s=20)["stdout"]
    if out != "answer-v1\n":
        failures.append(f"/work/data/answer reads {out!r}")
    assert not failures, "\n".join(failures)


def test_policy_back_to_writable_and_again(server, new_sb):
    sb = new_sb()
    _setup_stage(sb)
    set_fs(server, sb, EVAL_POLICY)
    summary, _ = attempt(sb, ["write", "/work/data/answer", "x"])
    assert not summary["ok"] and summary["errno"] == "EPERM", summary
    r = set_fs(server, sb, {})
    assert r["filesystem"] == {"read_only": [], "writable": []}, r
    cmds = [["write", "/work/data/answer", "answer-v2\n"], ["write", "/etc/marker", "marker-v2\n"],
            ["create", "/newfile", "x"], ["mkdir", "/work/data/newdir"], ["chmod", "/work/data/sub/deep", "600"],
            ["rename", "/work/data/sub", "/work/data/sub2"], ["unlink", "/work/data/victim"],
            ["rmdir", "/work/data/empty"], ["setxattr", "/work/data/answer", "user.ok", "1"],
            ["setflags", "/work/data/answer", "set", "40"]]
    failures = [f"{' '.join(c)} after going back to writable: {e!r}"
                for c, e in zip(cmds, ends(probe(sb, *cmds))) if not e["ok"]]
    res = sb.exec(["/bin/cat", "/work/data/answer", "/etc/marker", "/work/data/sub2/deep"], timeout_s=20)
    if res["stdout"] != "answer-v2\nmarker-v2\ndeep-v1\n":
        failures.append(f"after going back to writable the files read {res!r}")
    # And read-only again.
    set_fs(server, sb, EVAL_POLICY)
    for cmd in (["write", "/work/data/answer", "x"], ["write", "/etc/marker", "x"], ["unlink", "/newfile"],
                ["create", "/work/data/x", "x"]):
        summary, steps = attempt(sb, cmd)
        if summary["ok"] or summary.get("errno") != "EPERM":
            failures.append(f"{' '.join(cmd)} read-only again: {steps!r}")
    res = sb.exec(["/bin/cat", "/work/data/answer", "/etc/marker"], timeout_s=20)
    if res["stdout"] != "answer-v2\nmarker-v2\n":
        failures.append(f"read-only again, the files read {res!r}")
    assert not failures, "\n".join(failures)


def test_policy_at_create(server, new_sb):
    sb = new_sb(filesystem={"read_only": ["/etc"]})
    got = server.http("GET", f"/v1/sandboxes/{sb.id}").json
    assert got["filesystem"] == {"read_only": ["/etc"], "writable": []}, got
    failures = []
    for cmd in (["write", "/etc/marker", "x"], ["create", "/etc/new", "x"], ["unlink", "/etc/hostname"],
                ["rename", "/etc/passwd", "/etc/passwd2"], ["rename", "/etc/passwd", "/tmp/passwd"],
                ["chmod", "/etc/passwd", "666"]):
        summary, steps = attempt(sb, cmd)
        if summary["ok"] or summary.get("errno") != "EPERM":
            failures.append(f"{' '.join(cmd)}: {steps!r}")
    e = ends(probe(sb, ["create", "/tmp/x", "x"], ["create", "/root/x", "x"]))
    if not all(x["ok"] for x in e):
        failures.append(f"outside /etc: {e!r}")
    out = sb.exec(["/bin/cat", "/etc/marker", "/etc/hostname"], timeout_s=20)["stdout"]
    if out != "warren-e2e-rootfs\nsandbox\n":
        failures.append(f"/etc reads {out!r}")
    assert not failures, "\n".join(failures)


def test_policy_rejects_bad_and_missing_paths(server, new_sb, image):
    sb = new_sb()
    set_fs(server, sb, {"read_only": ["/etc"]})
    failures = []
    for bad in ({"read_only": ["etc"]}, {"read_only": ["/etc/"]}, {"read_only": ["/tmp/../etc"]},
                {"read_only": ["/etc//x"]}, {"read_only": ["/etc/./marker"]}, {"read_only": ["/does-not-exist"]},
                {"read_only": ["/"], "writable": ["/tmp/nope"]}):
        u.assert_error(put_fs(server, sb.id, bad), 400, "invalid")
        # A refused change changes nothing: the policy in force is still the one reported.
        got = server.http("GET", f"/v1/sandboxes/{sb.id}").json
        if got["filesystem"] != {"read_only": ["/etc"], "writable": []}:
            failures.append(f"after the refused {bad!r}, GET reports {got['filesystem']!r}")
        summary, steps = attempt(sb, ["write", "/etc/marker", "x"])
        if summary["ok"] or summary.get("errno") != "EPERM":
            failures.append(f"after the refused {bad!r}, /etc (still reported read-only) is writable: {steps!r}")
            set_fs(server, sb, {"read_only": ["/etc"]})
    assert ends(probe(sb, ["create", "/tmp/x", "x"]))[0]["ok"]
    assert sb.exec(["/bin/cat", "/etc/marker"], timeout_s=20)["stdout"] == "warren-e2e-rootfs\n" or failures
    assert not failures, "\n".join(failures)
    before = {s["id"] for s in server.http("GET", "/v1/sandboxes").json["sandboxes"]}
    r = server.http("POST", "/v1/sandboxes", {"image": image, "filesystem": {"read_only": ["/does-not-exist"]}},
                    timeout=120)
    u.assert_error(r, 400, "invalid")
    after = {s["id"] for s in server.http("GET", "/v1/sandboxes").json["sandboxes"]}
    assert after == before, f"a refused create left a sandbox: {after - before}"


def test_policy_protects_a_symlink_on_the_way(server, new_sb):
    sb = new_sb()
    _setup_stage(sb)
    sh_ok(sb, "ln -s /work/data /data")
    r = set_fs(server, sb, {"read_only": ["/data"]})
    assert r["filesystem"] == {"read_only": ["/data"], "writable": []}, r
    failures = []
    # The tree it points to, and the link itself (the entries of `/` are fixed).
    for cmd in (["write", "/data/answer", "x"], ["write", "/work/data/answer", "x"], ["create", "/work/data/x", "x"],
                ["unlink", "/data"], ["rename", "/data", "/data2"], ["symlinkover", "/tmp", "/data"],
                ["rename", "/tmp/fakelink", "/data"], ["create", "/newfile", "x"], ["mkdir", "/newdir"],
                ["rename", "/etc", "/etc2"], ["symlink", "/tmp", "/data2"]):
        if cmd[1] == "/tmp/fakelink":
            sh_ok(sb, "ln -sfn /tmp /tmp/fakelink")
        summary, steps = attempt(sb, cmd)
        if summary["ok"] or summary.get("errno") != "EPERM":
            failures.append(f"{' '.join(cmd)}: expected EPERM, got {steps!r}")
    got = stats(sb, ["/data", "/work/data/answer"])
    if got["/data"]["type"] != "symlink" or got["/data"]["data"] != "/work/data":
        failures.append(f"/data is now {got['/data']!r}")
    if got["/work/data/answer"]["data"] != b"answer-v1\n".hex():
        failures.append(f"/work/data/answer is now {got['/work/data/answer']!r}")
    # The directories of `/` stay writable, and so does /work beside the tree.
    e = ends(probe(sb, ["create", "/etc/newfile", "x"], ["create", "/tmp/newfile", "x"],
                   ["create", "/work/other", "x"], ["mkdir", "/root/d"]))
    if not all(x["ok"] for x in e):
        failures.append(f"subdirectories of / are not writable: {e!r}")
    assert not failures, "\n".join(failures)


def test_policy_change_on_a_paused_sandbox(server, new_sb):
    sb = new_sb()
    _setup_stage(sb)
    assert server.http("POST", f"/v1/sandboxes/{sb.id}/pause").status == 200
    r = set_fs(server, sb, EVAL_POLICY)
    assert r["state"] == "paused" and r["filesystem"] == EVAL_POLICY, r
    got = server.http("GET", f"/v1/sandboxes/{sb.id}").json
    assert got["state"] == "paused" and got["filesystem"] == EVAL_POLICY, got
    assert server.http("POST", f"/v1/sandboxes/{sb.id}/resume").status == 200
    summary, steps = attempt(sb, ["write", "/work/data/answer", "x"])
    assert not summary["ok"] and summary["errno"] == "EPERM", steps
    assert ends(probe(sb, ["create", "/work/out/x", "x"]))[0]["ok"]
    assert sb.exec(["/bin/cat", "/work/data/answer"], timeout_s=20)["stdout"] == "answer-v1\n"


# --------------------------------------------------------------------------
# 3. the tamper report
# --------------------------------------------------------------------------
def _raw(c: dict) -> bytes:
    return base64.b64decode(c["path_base64"]) if "path_base64" in c else c["path"].encode()


def test_changes_lists_every_tampering(server, new_sb, layers):
    sb = new_sb(tools=[TOOL], workspace=WS)
    made_from = {l["role"]: l for l in server.http("GET", f"/v1/sandboxes/{sb.id}").json["layers"]}
    assert set(made_from) == {"workspace", "tool", "base"}, made_from
    bad = b"/tmp/bad\xffname"
    sh_ok(sb, " && ".join([
        # added
        "printf 'new\\n' > /work/new.txt", "chmod 640 /work/new.txt",
        "mkdir /tmp/newdir", "ln -s /etc/passwd /tmp/lnk", "mkfifo /tmp/fifo",
        "printf 'secret\\n' > /dev/shm/secret",
        # modified, same size, mtime put back
        "touch -r /etc/marker /tmp/ref", "printf 'warren-e2e-rootfX\\n' > /etc/marker", "touch -r /tmp/ref /etc/marker",
        "touch -r /work/task.txt /tmp/ref2", "printf 'task-v9\\n' > /work/task.txt", "touch -r /tmp/ref2 /work/task.txt",
        # changed and changed back
        "printf 'x\\n' > /etc/hostname", "printf 'sandbox\\n' > /etc/hostname",
        # deleted
        "rm /etc/group", "rm /work/delete-me.txt",
        # a directory replaced by another with other contents, and one replaced by a file
        "rm -rf /work/tests", "mkdir /work/tests", "printf 'assert 1\\n' > /work/tests/test_a.txt",
        "rm -rf /work/dirB", "printf 'file\\n' > /work/dirB",
        # a directory's mode changed
        "chmod 700 /var",
    ]))
    e = ends(probe(sb, ["createhex", bad.hex(), "x"]))
    assert e[0]["ok"], e

    r = server.http("GET", f"/v1/sandboxes/{sb.id}/changes")
    assert r.status == 200, r
    doc = r.json
    assert doc["truncated"] is False, doc
    changes = doc["changes"]
    keys = [_raw(c) for c in changes]
    assert keys == sorted(keys), f"not sorted by path: {[c['path'] for c in changes]}"
    assert len(set(keys)) == len(keys), f"listed twice: {[c['path'] for c in changes]}"
    by = {_raw(c): c for c in changes}
    failures = []

    def expect(path, change, typ, layer=None, size=None, mode=None):
        c = by.get(path.encode() if isinstance(path, str) else path)
        if c is None:
            failures.append(f"{path!r} ({change} {typ}) is not listed")
            return
        if c["change"] != change or c["type"] != typ:
            failures.append(f"{path!r}: expected {change} {typ}, got {c!r}")
        if layer is not None and c.get("layer") != made_from[layer]:
            failures.append(f"{path!r}: expected layer {made_from[layer]!r}, got {c.get('layer')!r}")
        if size is not None and c.get("size") != size:
            failures.append(f"{path!r}: expected size {size}, got {c!r}")
        if mode is not None and (c.get("mode", 0) & 0o7777) != mode:
            failures.append(f"{path!r}: expected mode {oct(mode)}, got {c!r}")

    expect("/work/new.txt", "added", "file", size=4, mode=0o640)
    expect("/tmp/newdir", "added", "dir")
    expect("/tmp/lnk", "added", "symlink")
    expect("/tmp/fifo", "added", "other")
    expect("/dev/shm/secret", "added", "file", size=7)
    expect("/etc/marker", "modified", "file", layer="base", size=len("warren-e2e-rootfX\n"))
    expect("/work/task.txt", "modified", "file", layer="workspace", size=len("task-v9\n"))
    expect("/etc/hostname", "modified", "file", layer="base")
    expect("/etc/group", "deleted", "file", layer="base")
    expect("/work/delete-me.txt", "deleted", "file", layer="workspace")
    expect("/work/tests", "modified", "dir", layer="workspace")
    expect("/work/tests/test_a.txt", "modified", "file", layer="workspace", size=len("assert 1\n"))
    expect("/work/tests/test_b.txt", "deleted", "file", layer="workspace")
    expect("/work/dirB", "modified", "file", layer="workspace", size=len("file\n"))
    expect("/var", "modified", "dir", layer="base", mode=0o700)
    c = by.get(bad)
    if c is None:
        failures.append(f"{bad!r} is not listed: {[x['path'] for x in changes]}")
    else:
        if c["path"] != "/tmp/bad\ufffdname" or base64.b64decode(c.get("path_base64", "")) != bad:
            failures.append(f"the non-UTF-8 name is reported as {c!r}")
        if c["change"] != "added" or c["type"] != "file":
            failures.append(f"the non-UTF-8 name: {c!r}")
    # Directories only copied up to hold changes are no change; the tool is untouched.
    for p in ("/", "/etc", "/tmp", "/work", "/dev"):
        if p.encode() in by:
            failures.append(f"{p} is listed though only copied up: {by[p.encode()]!r}")
    for k in by:
        if k.startswith(b"/opt"):
            failures.append(f"tool path listed though nothing changed it: {by[k]!r}")
    for c in changes:
        if c["change"] not in ("added", "modified", "deleted") or c["type"] not in ("file", "dir", "symlink", "other"):
            failures.append(f"bad entry {c!r}")
        if c["change"] in ("modified", "deleted") and c.get("layer") not in made_from.values():
            failures.append(f"{c['change']} without the layer it shadows: {c!r}")

    # A prefix, and a limit.
    sub = server.http("GET", f"/v1/sandboxes/{sb.id}/changes?path=/etc").json
    want = [c for c in changes if _raw(c) == b"/etc" or _raw(c).startswith(b"/etc/")]
    if sub != {"changes": want, "truncated": False}:
        failures.append(f"?path=/etc gave {sub!r}, expected {want!r}")
    work = [c for c in changes if _raw(c).startswith(b"/work/")]
    lim = server.http("GET", f"/v1/sandboxes/{sb.id}/changes?path=/work&limit=2").json
    if lim != {"changes": work[:2], "truncated": True}:
        failures.append(f"?path=/work&limit=2 gave {lim!r}, expected {work[:2]!r} truncated")
    assert not failures, "\n".join(failures)


# --------------------------------------------------------------------------
# 4. masks
# --------------------------------------------------------------------------
def test_firmware_powercap_and_asound_are_masked(new_sb):
    sb = new_sb()
    host_fw = os.listdir("/sys/firmware")
    assert host_fw, "the host's /sys/firmware is empty: this test would prove nothing"
    failures = []
    for p, host in (("/sys/firmware", "/sys/firmware"),
                    ("/sys/devices/virtual/powercap", "/sys/devices/virtual/powercap"),
                    ("/proc/asound", "/proc/asound")):
        st = stats(sb, [p])[p]
        if not os.path.isdir(host):
            # Nothing to mask where the host has nothing.
            if st["ret"] == 0:
                failures.append(f"{p} exists in the sandbox though not on the host: {st!r}")
            continue
        if st.get("type") != "dir" or st.get("data") != []:
            failures.append(f"{p} is not an empty directory: {st!r}")
        vfs = [l for l in probe(sb, ["statvfs", p]) if l["op"] == "statvfs"][0]
        if not vfs["rdonly"]:
            failures.append(f"{p} is not on a read-only mount: {vfs!r}")
        for cmd in (["create", f"{p}/x", "x"], ["mkdir", f"{p}/x"], ["rmdir", p], ["rename", p, p + "2"]):
            summary, steps = attempt(sb, cmd)
            if summary["ok"]:
                failures.append(f"{' '.join(cmd)} worked: {steps!r}")
        summary, steps = attempt(sb, ["mount-over", p, "/tmp"])
        if [s for s in steps if s["ret"] >= 0]:
            failures.append(f"mount over {p}: {steps!r}")
        for name in os.listdir(host):
            st = stats(sb, [f"{p}/{name}"])[f"{p}/{name}"]
            if st["ret"] == 0:
                failures.append(f"{p}/{name} of the host is visible: {st!r}")
        if stats(sb, [p])[p].get("data") != []:
            failures.append(f"{p} is no longer empty")
    assert not failures, "\n".join(failures)
