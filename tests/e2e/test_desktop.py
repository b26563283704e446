"""Desktop sandboxes (issue 29): a screen an agent looks at and clicks, on the container,
microvm and vm backends.

A real Debian desktop image (`warren image build --debian bookworm --desktop`: Xvfb, openbox,
xterm) and a sandbox with `display`; the test opens a terminal window by clicking and typing
only, as a computer-use agent would, and checks what it typed through exec. Every screenshot
it takes is saved under $WARREN_E2E_ARTIFACTS (default /var/tmp/warren-e2e-artifacts/desktop)
so a person can look at them.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

import e2e_util as u

DESKTOP = "e2e-desktop:1"
W, H = 1024, 768
ARTIFACTS = Path(os.environ.get("WARREN_E2E_ARTIFACTS", "/var/tmp/warren-e2e-artifacts")) / "desktop"


@pytest.fixture(scope="module")
def desktop_image(server):
    r = server.cli("image", "build", DESKTOP, "--debian", "bookworm", "--desktop", timeout=1500)
    assert r.returncode == 0, f"desktop image build failed ({r.returncode}):\n{r.stderr[-4000:]}"
    yield DESKTOP
    server.cli("image", "rm", DESKTOP)


@pytest.fixture(scope="module")
def desk(server, desktop_image):
    c = server.client()
    sb = c.create(image=desktop_image, display={"width": W, "height": H}, memory_mb=1024)
    try:
        yield sb
    finally:
        server.http("DELETE", "/v1/sandboxes/" + sb.id, timeout=60)


def png_size(png: bytes):
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:16]
    return struct.unpack(">II", png[16:24])


def save(name: str, png: bytes) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{name}.png").write_bytes(png)


def screen_until(sb, changed_from: bytes, timeout=30.0) -> bytes:
    """A screenshot once the screen differs from `changed_from` (the programs draw when they
    are ready; an agent looks before it clicks)."""
    got = u.wait_until(lambda: (lambda p: p if p != changed_from else None)(sb.screenshot()),
                       timeout=timeout, interval=0.2)
    assert got, "the screen did not change"
    return got


def terminal_shell_started(sb) -> bool:
    """Whether an xterm runs a shell yet: its window then has the focus and reads keys. A changed
    screen alone does not say so (the pointer's move highlights the menu entry first), and an
    emulated CPU takes seconds to start xterm, so the test waits for the process, as an agent
    waits for the prompt it sees."""
    stats = sb.run("cat /proc/[0-9]*/stat 2>/dev/null").stdout.splitlines()
    procs = []
    for line in stats:
        pid, rest = line.split(" (", 1)
        comm, tail = rest.rsplit(") ", 1)
        procs.append((int(pid), comm, int(tail.split()[1])))
    terms = {pid for pid, comm, _ in procs if comm == "xterm"}
    return any(ppid in terms for _, _, ppid in procs)


def test_record_and_screen(server, desk):
    rec = server.http("GET", f"/v1/sandboxes/{desk.id}").json
    assert rec["display"] == {"width": W, "height": H}, rec
    png = desk.screenshot()
    assert png_size(png) == (W, H)
    save("00-empty-desktop", png)
    r = desk.run("echo $DISPLAY; test -S /tmp/.X11-unix/X0 && echo socket")
    assert r.stdout.split() == [":0", "socket"], r


def test_open_a_terminal_by_clicking_and_typing(server, desk):
    before = desk.screenshot()
    save("01-before", before)
    # Right click on the desktop: openbox's menu.
    desk.click(400, 300, button="right")
    menu = screen_until(desk, before)
    save("02-menu", menu)
    # Its first entry is "Terminal emulator", just under where the menu opened.
    desk.click(430, 309)
    screen_until(desk, menu)
    assert u.wait_until(lambda: terminal_shell_started(desk), timeout=30, interval=0.3)
    time.sleep(0.5)  # the window maps and takes the focus
    term = desk.screenshot()
    save("03-terminal", term)
    # The new window has the focus: type into it.
    desk.type("echo typed-on-the-desktop-$((6*7)) > /tmp/from-the-desktop\n")
    ok = u.wait_until(lambda: desk.run("cat /tmp/from-the-desktop").stdout == "typed-on-the-desktop-42\n",
                      timeout=20, interval=0.3)
    after = desk.screenshot()
    save("04-after-typing", after)
    assert ok, desk.run("cat /tmp/from-the-desktop; cat /tmp/.warren-display.log")
    # The text shows: the screen changed where the terminal is.
    assert after != term
    # A key combination reaches the program too: ctrl+u clears the line, then the command runs.
    desk.type("echo not-this")
    desk.key("ctrl+u")
    desk.type("echo second > /tmp/second\n")
    assert u.wait_until(lambda: desk.run("cat /tmp/second").stdout == "second\n", timeout=20, interval=0.3)
    save("05-after-keys", desk.screenshot())


@pytest.mark.serve_only("the cluster target's nodes run with --no-microvm (VMs are tested on serve)")
def test_a_microvm_desktop(server, desktop_image, sandboxes):
    """The same agent in a microVM's guest starts the same screen: a right click opens the menu."""
    sb = server.client().create(image=desktop_image, backend="microvm", memory_mb=1024,
                                display={"width": 800, "height": 600})
    sandboxes.append(sb.id)
    before = sb.screenshot()
    assert png_size(before) == (800, 600)
    sb.click(300, 200, button="right")
    save("10-microvm-menu", screen_until(sb, before, timeout=60))


@pytest.mark.serve_only("the cluster target's nodes run with --no-microvm (VMs are tested on serve)")
def test_a_vm_desktop_through_qemu(server, desktop_image, sandboxes):
    """A whole VM's screen is QEMU's: its display device, screendump and input-send-event on a
    virtio tablet and keyboard. The guest's own Xorg draws on it; the test opens a terminal by
    clicking and typing only and checks what it typed through exec."""
    sb = server.client().create(image=desktop_image, backend="vm", memory_mb=1024,
                                display={"width": 800, "height": 600})
    sandboxes.append(sb.id)
    before = sb.screenshot()
    assert png_size(before) == (800, 600)
    save("20-vm-desktop", before)
    r = sb.run("cat /proc/[0-9]*/comm | grep -x -e Xorg -e Xvfb")
    assert r.stdout.split() == ["Xorg"], (r.stdout, r.stderr)
    sb.click(300, 200, button="right")
    menu = screen_until(sb, before, timeout=60)
    save("21-vm-menu", menu)
    sb.click(330, 209)
    screen_until(sb, menu, timeout=60)
    assert u.wait_until(lambda: terminal_shell_started(sb), timeout=90, interval=0.5)
    time.sleep(2.0)  # the window maps and takes the focus (emulated CPU)
    term = sb.screenshot()
    save("22-vm-terminal", term)
    sb.type("echo typed-in-a-vm-$((6*7)) > /tmp/from-the-vm\n")
    ok = u.wait_until(lambda: sb.run("cat /tmp/from-the-vm").stdout == "typed-in-a-vm-42\n",
                      timeout=60, interval=0.5)
    after = sb.screenshot()
    save("23-vm-after-typing", after)
    assert ok, sb.run("cat /tmp/from-the-vm; tail -20 /tmp/.warren-display.log").stdout
    assert after != term
    # A character no key of the VM's US keyboard types is refused, naming it.
    err = u.assert_error(server.http("POST", f"/v1/sandboxes/{sb.id}/input",
                                     {"actions": [{"type": "type", "text": "\u00e9"}]}), 400, "invalid")
    assert "U+00E9" in err["message"], err


def _jpeg_size(data: bytes):
    """(width, height) from a JPEG's start-of-frame segment."""
    i = 2
    while i + 9 < len(data):
        assert data[i] == 0xFF, "not a JPEG segment"
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        i += 2 + length
    raise AssertionError("no start-of-frame in the JPEG")


class _RfbViewer:
    """A VNC viewer reduced to what the test does (RFC 6143): version 3.8, no security,
    shared, then pointer events and update requests in the server's pixel format."""

    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        assert self._read(12) == b"RFB 003.008\n"
        self.s.sendall(b"RFB 003.008\n")
        n = self._read(1)[0]
        assert 1 in self._read(n)
        self.s.sendall(b"\x01")
        assert self._read(4) == b"\0\0\0\0"
        self.s.sendall(b"\x01")
        self.width, self.height = struct.unpack(">HH", self._read(4))
        self.bpp = self._read(16)[0]
        self.name = self._read(struct.unpack(">I", self._read(4))[0]).decode()

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            assert chunk, "the server closed the connection"
            out += chunk
        return out

    def pointer(self, x: int, y: int, buttons: int) -> None:
        self.s.sendall(struct.pack(">BBHH", 5, buttons, x, y))

    def update(self, incremental: bool):
        """Asks for an update; returns its rectangles as (x, y, w, h)."""
        self.s.sendall(struct.pack(">BBHHHH", 3, int(incremental), 0, 0, self.width, self.height))
        assert self._read(2)[0] == 0
        rects = []
        for _ in range(struct.unpack(">H", self._read(2))[0]):
            x, y, w, h, enc = struct.unpack(">HHHHi", self._read(12))
            assert enc == 0  # Raw
            self._read(w * h * self.bpp // 8)
            rects.append((x, y, w, h))
        return rects


def test_a_live_view_in_vnc_clients(server, desk, tmp_path):
    """`warren vnc` serves the screen to VNC clients: a real one (vncsnapshot, RFB 3.3) takes
    a picture of the screen; a viewer's right click opens the menu, and its next incremental
    update is the rectangle that changed."""
    port = u.free_port()
    proc = subprocess.Popen([server.bin, "vnc", desk.id, "--listen", f"127.0.0.1:{port}"],
                            env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "connect a VNC client" in proc.stdout.readline()
        shot = tmp_path / "vnc.jpg"
        r = subprocess.run(["vncsnapshot", "-allowblank", "-quiet", f"127.0.0.1::{port}", str(shot)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert _jpeg_size(shot.read_bytes()) == (W, H)
        (ARTIFACTS / "30-vncsnapshot.jpg").write_bytes(shot.read_bytes())

        desk.key("esc")  # no menu open from an earlier test
        v = _RfbViewer(port)
        assert (v.width, v.height, v.name) == (W, H, f"warren {desk.id}")
        assert v.update(incremental=False) == [(0, 0, W, H)]
        v.pointer(600, 400, 0)
        v.pointer(600, 400, 4)  # right button down, then up: openbox's menu
        v.pointer(600, 400, 0)
        rects = v.update(incremental=True)  # answered once the screen has changed
        assert len(rects) == 1, rects
        x, y, w, h = rects[0]
        assert x <= 600 < x + w + 2 and y <= 400 < y + h + 2 and (w, h) != (W, H), rects[0]
        save("31-vnc-menu", desk.screenshot())
        desk.key("esc")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_errors_name_what_is_wrong(server, image, desk, sandboxes):
    base = f"/v1/sandboxes/{desk.id}/input"
    for actions, word in (([{"type": "fly"}], "action 0 (fly)"),
                          ([{"type": "click", "x": W, "y": 0}], "action 0 (click)"),
                          ([{"type": "move", "x": 1, "y": 1}, {"type": "key", "keys": "ctrl+nokey"}], "action 1 (key)"),
                          ([{"type": "click", "button": "fourth"}], "button"),
                          ([{"type": "type", "text": "x" * 20000}], "characters"),
                          ([{"type": "wait", "ms": 60000}], "ms"),
                          ([], "actions")):
        err = u.assert_error(server.http("POST", base, {"actions": actions}), 400, "invalid")
        assert word in err["message"], (actions[:1], err)
    u.assert_error(server.http("POST", base, {"actions": [{"type": "move", "x": 1, "y": 1}], "x": 1}), 400, "invalid")
    # A sandbox without a display: 409 for both.
    r = server.http("POST", "/v1/sandboxes", {"image": image})
    sandboxes.append(r.json["id"])
    err = u.assert_error(server.http("GET", f"/v1/sandboxes/{r.json['id']}/screen"), 409, "conflict")
    assert "display" in err["message"], err
    u.assert_error(server.http("POST", f"/v1/sandboxes/{r.json['id']}/input",
                               {"actions": [{"type": "move", "x": 1, "y": 1}]}), 409, "conflict")
    # Bad displays at create.
    for display in ({"width": 10, "height": 10}, {"width": 5000, "height": 800}, {"width": 800},
                    {"width": 800, "height": 600, "depth": 8}):
        u.assert_error(server.http("POST", "/v1/sandboxes", {"image": image, "display": display}), 400, "invalid")
    err = u.assert_error(server.http("POST", "/v1/sandboxes", {"image": image, "backend": "fncall",
                                                               "display": {"width": 800, "height": 600}}),
                         400, "invalid")
    assert "display" in err["message"], err


def test_an_image_without_an_x_server_fails_the_create_whole(server, image):
    before = {s["id"] for s in server.http("GET", "/v1/sandboxes").json["sandboxes"]}
    err = u.assert_error(server.http("POST", "/v1/sandboxes",
                                     {"image": image, "display": {"width": 800, "height": 600}}),
                         400, "invalid")
    assert "Xvfb" in err["message"] and "--desktop" in err["message"], err
    after = {s["id"] for s in server.http("GET", "/v1/sandboxes").json["sandboxes"]
             if s["state"] not in ("deleted",)}
    assert after <= before, after - before


def test_screenshots_are_rate_limited_not_refused(server, desk):
    statuses = [server.http("GET", f"/v1/sandboxes/{desk.id}/screen").status for _ in range(40)]
    assert statuses[0] == 200 and set(statuses) <= {200, 429}, statuses
    if 429 in statuses:
        time.sleep(3)  # the bucket refills
    assert server.http("GET", f"/v1/sandboxes/{desk.id}/screen").status == 200
