"""Interactive execs (issue 29): a terminal of the sandbox's own, input while it runs,
`warren exec -it` under a real outside terminal (tmux), and the SDK's `sb.pty`.

The CLI tests drive `warren exec -it` inside tmux as a person would: keys go in with
send-keys, the screen comes out with capture-pane.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import time
from typing import List

import pytest

import e2e_util as u


@pytest.fixture
def sid(server, image, sandboxes):
    r = server.http("POST", "/v1/sandboxes", {"image": image})
    assert r.status == 201, r
    sandboxes.append(r.json["id"])
    return r.json["id"]


def _start(server, sid, body) -> str:
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", body)
    assert r.status == 202, r
    return r.json["exec_id"]


def _wait_running(server, sid, cmdline: str, timeout=30) -> None:
    """Until a process with `cmdline` runs in the sandbox: a ^C sent before the shell has made
    it the terminal's foreground job would go to the shell instead."""
    probe = {"argv": ["sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"]}

    def running():
        r = server.http("POST", f"/v1/sandboxes/{sid}/exec", probe)
        return r.status == 200 and cmdline in r.json.get("stdout", "")
    assert u.wait_until(running, timeout=timeout, interval=0.1), f"{cmdline!r} did not start"
    time.sleep(0.2)  # its shell has set the foreground group before the exec


def _input(server, sid, eid, data=None, **kw):
    body = dict(kw)
    if data is not None:
        body["data"] = data
    return server.http("POST", f"/v1/sandboxes/{sid}/execs/{eid}/input", body)


def _result(server, sid, eid, timeout=30):
    def ended():
        r = server.http("GET", f"/v1/sandboxes/{sid}/execs/{eid}").json
        return r if r["state"] == "exited" else None
    res = u.wait_until(ended, timeout=timeout)
    assert res, f"exec {eid} still runs after {timeout}s"
    return res


def _screen_bytes(server, sid, eid) -> bytes:
    r = server.http("GET", f"/v1/sandboxes/{sid}/execs/{eid}").json
    return base64.b64decode(r["stdout_b64"]) if "stdout_b64" in r else r["stdout"].encode()


def _wait_output(server, sid, eid, text: bytes, timeout=20) -> bytes:
    out = u.wait_until(lambda: (lambda b: b if text in b else None)(_screen_bytes(server, sid, eid)),
                       timeout=timeout)
    assert out, f"{text!r} did not show; the terminal has {_screen_bytes(server, sid, eid)[-400:]!r}"
    return out


def _host_ptys() -> set:
    return set(os.listdir("/dev/pts"))


def test_tty_exec_has_its_own_terminal_of_the_size_asked(server, sid):
    before = _host_ptys()
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", {
        "cmd": "stty size; tty; test -t 0 && test -t 1 && test -t 2 && echo all-three; "
               "echo TERM=$TERM; ls /dev/pts; echo err >&2",
        "tty": True, "rows": 31, "cols": 101, "wait": True})
    assert r.status == 200, r
    res = r.json
    assert res["exit_code"] == 0, res
    out = base64.b64decode(res["stdout_b64"]).decode()
    lines = out.replace("\r\n", "\n").split("\n")
    assert lines[0] == "31 101", out
    assert lines[1].startswith("/dev/pts/"), out
    assert "all-three" in lines and "TERM=xterm" in lines, out
    # The sandbox's own devpts: only its one terminal and ptmx; stderr is the terminal too.
    assert lines[4].split() == ["0", "ptmx"], out
    assert "err" in lines and res["stderr"] == "", res
    # The host's devpts never saw it.
    assert _host_ptys() == before


def test_tty_session_over_the_api(server, sid):
    """Type into a shell, resize it, interrupt a job with ^C, read the exit code."""
    before = _host_ptys()
    eid = _start(server, sid, {"argv": ["sh"], "tty": True, "rows": 24, "cols": 80})
    assert _host_ptys() == before
    assert _input(server, sid, eid, "echo one-$((40+2))\n").status == 204
    _wait_output(server, sid, eid, b"one-42")
    assert server.http("POST", f"/v1/sandboxes/{sid}/execs/{eid}/resize",
                       {"rows": 50, "cols": 132}).status == 204
    _input(server, sid, eid, "stty size\n")
    _wait_output(server, sid, eid, b"50 132")
    _input(server, sid, eid, "sleep 600\n")
    _wait_running(server, sid, "sleep 600 ")
    _input(server, sid, eid, "\x03")  # ^C: the terminal's line discipline makes it SIGINT
    _input(server, sid, eid, "echo rc=$?\n")
    _wait_output(server, sid, eid, b"rc=130")
    # Raw bytes both ways: what the terminal echoes is exact.
    _input(server, sid, eid, data_b64=base64.b64encode("printf '\\303\\251\\n'\n".encode()).decode())
    _wait_output(server, sid, eid, "\u00e9".encode())
    _input(server, sid, eid, "exit 5\n")
    res = _result(server, sid, eid)
    assert res["exit_code"] == 5 and res["stdout_truncated"] is False, res
    # Gone: input and resize say so.
    u.assert_error(_input(server, sid, eid, "x"), 409, "conflict")
    u.assert_error(server.http("POST", f"/v1/sandboxes/{sid}/execs/{eid}/resize",
                               {"rows": 10, "cols": 10}), 409, "conflict")


def test_stream_carries_a_terminal_exactly(server, sid):
    eid = _start(server, sid, {"cmd": "printf 'a\\033[1mb\\n'; exit 3", "tty": True})
    r = server.http("GET", f"/v1/sandboxes/{sid}/execs/{eid}/stream?after=0", timeout=60)
    lines = [json.loads(x) for x in r.body.decode().splitlines() if x.strip()]
    data = b"".join(base64.b64decode(x["data_b64"]) for x in lines if "data_b64" in x)
    assert data == b"a\x1b[1mb\r\n", data
    assert lines[-1]["result"]["exit_code"] == 3
    assert all(x.get("stream", "stdout") == "stdout" for x in lines[:-1])


def test_stdin_open_takes_input_while_it_runs(server, sid):
    eid = _start(server, sid, {"cmd": "read a; echo got:$a; wc -c", "stdin_open": True})
    assert _input(server, sid, eid, "first\n").status == 204
    _wait_output(server, sid, eid, b"got:first")  # answered before its stdin ends
    assert _input(server, sid, eid, "12345").status == 204
    assert _input(server, sid, eid, "678", eof=True).status == 204
    res = _result(server, sid, eid)
    assert res["exit_code"] == 0 and res["stdout"].split() == ["got:first", "8"], res


def test_input_refusals(server, sid):
    # An exec that takes no input.
    plain = _start(server, sid, {"argv": ["sleep", "30"], "wait": False})
    u.assert_error(_input(server, sid, plain, "x"), 409, "conflict")
    u.assert_error(server.http("POST", f"/v1/sandboxes/{sid}/execs/{plain}/resize",
                               {"rows": 10, "cols": 10}), 409, "conflict")
    server.http("POST", f"/v1/sandboxes/{sid}/execs/{plain}/signal", {"signal": "KILL"})
    # A command that does not read: 1 MiB waits, then 429 (nothing grows without bound), and the
    # sandbox goes on.
    eid = _start(server, sid, {"argv": ["sleep", "600"], "stdin_open": True})
    chunk = "x" * (256 * 1024)
    statuses: List[int] = []
    for _ in range(8):
        statuses.append(_input(server, sid, eid, chunk).status)
        if statuses[-1] != 204:
            break
    assert statuses[-1] == 429 and statuses.count(204) >= 3, statuses
    err = u.assert_error(_input(server, sid, eid, chunk), 429, "quota")
    assert "not reading" in err["message"], err
    server.http("POST", f"/v1/sandboxes/{sid}/execs/{eid}/signal", {"signal": "KILL"})
    assert _result(server, sid, eid)["signal"] == "KILL"
    assert server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}).json["exit_code"] == 0
    # Malformed requests name what is wrong.
    tty = _start(server, sid, {"argv": ["sleep", "30"], "tty": True})
    for body, word in (({"data": "a", "data_b64": "YQ=="}, "data"), ({"data_b64": "%%"}, "data_b64"),
                       ({}, "eof"), ({"data": "a", "what": 1}, "what"),
                       ({"data": "y" * ((1 << 20) + 1)}, "1048576")):
        err = u.assert_error(server.http("POST", f"/v1/sandboxes/{sid}/execs/{tty}/input", body),
                             400, "invalid")
        assert word in err["message"], (body.keys(), err)
    for body in ({"rows": 0, "cols": 10}, {"rows": 10, "cols": 1001}, {"rows": 10}, {"rows": "a", "cols": 1}):
        u.assert_error(server.http("POST", f"/v1/sandboxes/{sid}/execs/{tty}/resize", body), 400, "invalid")
    u.assert_error(_input(server, sid, "ex-000000000000", "x"), 404, "not_found")
    err = u.assert_error(server.http("POST", f"/v1/sandboxes/{sid}/exec",
                                     {"argv": ["true"], "rows": 10}), 400, "invalid")
    assert "tty" in err["message"], err
    u.assert_error(server.http("POST", f"/v1/sandboxes/{sid}/exec",
                               {"argv": ["true"], "tty": True, "cols": 5000}), 400, "invalid")
    server.http("POST", f"/v1/sandboxes/{sid}/execs/{tty}/signal", {"signal": "KILL"})


def test_a_trajectory_step_cannot_be_interactive(server, image, sandboxes):
    r = server.http("POST", "/v1/sandboxes", {"image": image, "trajectory": u.unique("pty-traj")})
    assert r.status == 201, r
    sandboxes.append(r.json["id"])
    for extra in ({"tty": True}, {"stdin_open": True}):
        err = u.assert_error(server.http("POST", f"/v1/sandboxes/{r.json['id']}/exec",
                                         dict({"argv": ["sh"]}, **extra)), 400, "invalid")
        assert "trajectory" in err["message"], err


# -- warren exec -it under a real terminal ------------------------------------------------

class Tmux:
    """A tmux server of the test's own (its own socket), one window of `cols` x `rows`."""

    def __init__(self, tmp_path, cols=100, rows=30, name="tmux"):
        self.sock = str(tmp_path / f"{name}.sock")
        self.cols, self.rows = cols, rows

    def run(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"tmux {args}: {r.stderr}"
        return r.stdout

    def start(self, command: str, env: dict) -> None:
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # The exit code stays on screen after the client ends.
        self.run("new-session", "-d", "-x", str(self.cols), "-y", str(self.rows),
                 f"env {envs} {command}; echo EXIT=$?; sleep 600")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", *keys)

    def type(self, text: str) -> None:
        self.run("send-keys", "-l", text)

    def screen(self) -> str:
        return self.run("capture-pane", "-p")

    def wait_for(self, text: str, timeout: float = 20) -> str:
        got = u.wait_until(lambda: (lambda s: s if text in s else None)(self.screen()), timeout=timeout)
        assert got, f"{text!r} did not show; the screen:\n{self.screen()}"
        return got

    def save(self, path) -> None:
        path.write_text(self.screen())

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()


def _cli_env(server) -> dict:
    return {"WARREN_URL": server.url, "WARREN_TOKEN": server.token, "TERM": "xterm"}


def test_cli_exec_it_behaves_like_a_terminal(server, sid, tmux, tmp_path):
    tmux.start(f"{server.bin} exec -it {sid} -- sh", _cli_env(server))
    tmux.wait_for("/ #")
    # Line editing happens in the sandbox's terminal: the backspace removes the typo.
    tmux.type("echo helx")
    tmux.keys("BSpace")
    tmux.type("lo-$((6*7))")
    tmux.keys("Enter")
    tmux.wait_for("hello-42")
    tmux.type("stty size")
    tmux.keys("Enter")
    tmux.wait_for("30 100")
    # The window changes size: the command's terminal follows (SIGWINCH).
    tmux.run("resize-window", "-x", "120", "-y", "40")
    time.sleep(0.5)
    tmux.type("stty size")
    tmux.keys("Enter")
    tmux.wait_for("40 120")
    # Ctrl-C goes to the command, not to the client.
    tmux.type("sleep 601")
    tmux.keys("Enter")
    _wait_running(server, sid, "sleep 601 ")
    tmux.keys("C-c")
    tmux.type("echo rc=$?")
    tmux.keys("Enter")
    tmux.wait_for("rc=130")
    tmux.type("exit 7")
    tmux.keys("Enter")
    screen = tmux.wait_for("EXIT=7")
    (tmp_path / "screen.txt").write_text(screen)


def test_cli_exec_it_runs_a_full_screen_editor(server, sid, tmux, tmp_path):
    """busybox vi: cursor addressing, Escape, a command line; the file it writes is real."""
    tmux.start(f"{server.bin} exec -it {sid} -- vi /tmp/note.txt", _cli_env(server))
    tmux.wait_for("/tmp/note.txt")
    tmux.type("i")
    tmux.type("written in vi")
    tmux.keys("Escape")
    # As a person types: vi reads a lone Escape only after a pause (it may start a key's
    # escape sequence).
    time.sleep(0.5)
    tmux.type(":wq")
    tmux.keys("Enter")
    tmux.wait_for("EXIT=0")
    r = server.http("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["cat", "/tmp/note.txt"]})
    assert r.json["stdout"] == "written in vi\n", r.json
    # `top` draws and quits on its key.
    top = Tmux(tmp_path, name="top")
    try:
        top.start(f"{server.bin} exec -it {sid} -- top", _cli_env(server))
        top.wait_for("PID")
        top.type("q")
        top.wait_for("EXIT=0")
    finally:
        top.kill()


def test_cli_exec_t_without_i_sends_no_input(server, sid, tmux):
    tmux.start(f"{server.bin} exec -t {sid} -- sh -c 'tty; stty size; exit 4'", _cli_env(server))
    screen = tmux.wait_for("EXIT=4")
    assert "/dev/pts/0" in screen and "30 100" in screen, screen


# -- SDK --------------------------------------------------------------------------------------

def test_sdk_pty(server, sid):
    c = server.client()
    sb = c.get(sid)
    with sb.pty("sh", rows=20, cols=70) as term:
        term.read_until("# ")
        term.write("stty size\n")
        assert b"20 70" in term.read_until("# ")
        term.resize(33, 99)
        term.write("stty size\n")
        term.read_until("33 99")
        term.write("read x; echo got-$x\n")
        term.write("abc\n")
        term.read_until("got-abc")
        term.write("exit 9\n")
        res = term.wait(timeout=30)
        assert res.exit_code == 9 and b"got-abc" in term.output
    # Pipes that stay open.
    eid = sb.start(["sh", "-c", "read a; echo got:$a"], stdin_open=True)
    sb.send_input(eid, "xyz\n")
    res = u.wait_until(lambda: (lambda r: r if r.exit_code is not None else None)(sb.exec_result(eid)))
    assert res and res.stdout == "got:xyz\n", res
