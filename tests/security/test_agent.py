"""The agent (PID 1 of every sandbox) as a target: THREATS #1, #9, #31.

The agent holds the control socket to the node.  An occupant that could trace it, read its
memory, steal its descriptors or overwrite its binary could forge command results or reach
the node.  Each test runs in its own sandbox (an attack that worked could break the agent) and
ends by checking that the agent still serves commands.
"""

from __future__ import annotations

import pytest

import e2e_util as u
from sec_util import denied, healthy, one, pick


@pytest.fixture
def sb(make_sandbox):
    return make_sandbox()


def test_ptrace_pid1(sb, weak):
    results = sb.attack("ptrace")
    rs = pick(results, "ptrace_seize_1") + pick(results, "ptrace_attach_1")
    assert len(rs) == 3, results
    bad = [r for r in rs if not denied(r, {"EPERM", "EACCES"})]
    assert not bad, f"the agent can be traced: {bad}"
    assert sb.alive()
    # control: without Warren a namespace root traces its PID 1 (and peeks at it)
    ctl = weak("ptrace")
    assert one(ctl, "ptrace_attach_1")["ret"] == 0, ctl


def test_process_vm_readv_writev_pid1(sb, weak):
    results = sb.attack("process_vm")
    rs = pick(results, "process_vm_readv_1") + pick(results, "process_vm_writev_1")
    assert len(rs) == 3, results
    bad = [r for r in rs if not denied(r, {"EPERM", "EACCES"})]
    assert not bad, f"the agent's memory is reachable: {bad}"
    assert sb.alive()
    ctl = weak("process_vm")
    assert one(ctl, "process_vm_readv_1")["ret"] > 0, ctl


def test_pidfd_getfd_cannot_steal_agent_descriptors(sb, weak):
    """pidfd_getfd on the agent would hand the occupant the node's control socket (fd 3)."""
    results = sb.attack("pidfd")
    g = one(results, "pidfd_getfd_1")
    assert g["fds_stolen"] == 0 and g["ret"] < 0, f"descriptors stolen from the agent: {g}"
    assert sb.alive()
    ctl = one(weak("pidfd"), "pidfd_getfd_1")
    assert ctl["fds_stolen"] > 0, ctl


def test_pidfd_open_pid1_refused(sb):
    """Policy: pidfd_open on pid 1 is refused, also when the pid argument carries garbage in
    its upper 32 bits (pidfd_open takes a pid_t; a 64-bit `eq 1` rule would not match)."""
    results = sb.attack("pidfd")
    rs = pick(results, "pidfd_open_1")
    assert rs, results
    bad = [r for r in rs if not denied(r, {"EPERM", "EACCES"})]
    assert not bad, f"pidfd_open(1) went through: {bad}"


def test_proc_pid1_files_closed(sb, weak):
    """/proc/1/mem, environ, maps, fd/*, root, cwd, exe of the non-dumpable agent."""
    results = sb.attack("proc1")
    opens = pick(results, "proc1_open")
    links = pick(results, "proc1_readlink")
    assert len(opens) == 8 and len(links) == 4, results
    bad = [r for r in opens if r["ret"] >= 0 and r.get("read", -2) >= 0]
    bad += [r for r in links if r["ret"] >= 0]
    assert not bad, f"the agent's /proc entries are open to commands: {bad}"
    ctl = weak("proc1")
    assert one(ctl, "proc1_open", path="/proc/1/environ")["ret"] >= 0, ctl


def test_overwrite_agent_binary_through_proc1_exe(sb, make_sandbox, server):
    """CVE-2019-5736 against our agent: /proc/1/exe (on a read-only tmpfs of the node's, or a
    sealed memfd) must not be writable."""
    results = sb.attack("proc1_exe")
    assert results, sb.last
    opened = [r for r in results if r["attack"].startswith("proc1_exe_open") and r["ret"] >= 0]
    for name in ("proc1_exe_pwrite", "proc1_exe_mmap_shared_write", "proc1_exe_open_trunc",
                 "proc1_exe_ftruncate", "proc1_exe_open_wronly"):
        for r in pick(results, name):
            assert r["ret"] < 0, f"{name} worked on the agent binary: {r}"
    if any(r["attack"] == "proc1_exe_open_rdwr" for r in opened):
        seals = one(results, "proc1_exe_seals")
        assert all(seals[k] for k in ("write", "shrink", "grow", "seal")), f"agent memfd not fully sealed: {seals}"
    assert sb.alive()
    # The agent is shared by every sandbox: a new one still starts and runs commands.
    other = make_sandbox(install=False)
    assert other.alive()


def test_overwrite_agent_binary_through_file_api(sb, make_sandbox):
    """The file API is served by the agent itself: /proc/self/exe there *is* the agent."""
    for path in ("/proc/self/exe", "/proc/1/exe"):
        r = sb.put(path, b"\x7fELF-pwned")
        assert r.status != 204, f"PUT {path} accepted: {r!r}"
    assert sb.alive()
    other = make_sandbox(install=False)
    assert other.alive()


def test_kill_pid1_from_inside(sb):
    """`kill -9 1` and friends: PID 1 ignores signals from its own namespace; a later exec works."""
    res = sb.sh("kill -9 1; kill -TERM 1; kill -INT 1; kill -HUP 1; kill -STOP 1; echo sent")
    assert "sent" in res["stdout"], res
    assert sb.alive(), "the agent died or stopped after kill from inside"
    results = sb.attack("kill1", "9", "15", "2", "1", "3", "6", "10", "12", "13", "14", "19", "20",
                        "11", "7", "8", "31", "17", "18", timeout_s=30)
    # kill(-1, SIGKILL) also kills the attack itself, so its own line may be missing
    assert pick(results, "kill_1"), sb.last
    assert sb.alive(), f"the agent did not survive signals: {results}"
    r = sb.exec(["/bin/sh", "-c", "echo after"], timeout_s=20)
    assert r["exit_code"] == 0 and r["stdout"] == "after\n", r


def test_agent_environment_has_no_secrets(sb, server):
    """THREATS #9: nothing of the host's environment or the API token inside the sandbox."""
    res = sb.sh("cat /proc/self/environ | tr '\\0' '\\n'; echo ---; env")
    env_text = res["stdout"]
    r = sb.get("/proc/1/environ")
    if r.status == 200:
        env_text += r.body.decode("utf-8", "replace")
    assert server.token not in env_text
    for needle in ("WARREN_TOKEN", "PYENV", "SSH_", "PYTEST", "/root/.", "admin.token"):
        assert needle not in env_text, f"{needle!r} in the sandbox environment:\n{env_text}"
    assert healthy(server)


def _agent_host_pid(sb) -> int:
    """The host pid of the sandbox's agent: the process of the sandbox's host uid whose
    parent is outside the sandbox's PID namespace."""
    host_uid = int(sb.probe()["uid_map"].split()[1])
    cands = []
    for p in u.processes_with_uid(host_uid):
        try:
            with open(f"/proc/{p}/status") as f:
                st = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        except OSError:
            continue
        nspid = st.get("NSpid", "").split()
        if nspid and nspid[-1] == "1":
            cands.append(p)
    assert len(cands) == 1, f"agent of {sb.id} not found among uid {host_uid}: {cands}"
    return cands[0]


def test_agent_is_oom_protected(sb):
    """SECURITY.md: the OOM killer picks a command, never the agent. The node lowers the
    agent's oom_score_adj to -998 where root may (CAP_SYS_RESOURCE); where it may not (this
    build VM) every command runs 998 above the agent instead. Either way the gap is 998, and
    a command cannot lower itself below the agent. (Where the node cannot lower the agent, a
    command may come back down to the agent's level; the OOM killer then weighs size, and the
    worst an occupant can do is kill its own sandbox's agent — SECURITY.md lists this.)"""
    pid = _agent_host_pid(sb)
    with open(f"/proc/{pid}/oom_score_adj") as f:
        agent_adj = int(f.read())
    r = sb.exec(["/bin/sh", "-c", "cat /proc/self/oom_score_adj; echo -1000 > /proc/self/oom_score_adj; "
                 "echo 0 > /proc/self/oom_score_adj; cat /proc/self/oom_score_adj"], timeout_s=30)
    first, after = [int(x) for x in r["stdout"].split()]
    assert first - agent_adj >= 998 or first == 1000, \
        f"agent adj {agent_adj}, command adj {first}: the OOM killer may pick the agent"
    assert after >= agent_adj and after >= 0, \
        f"a command lowered its oom_score_adj to {after} (agent {agent_adj})"
