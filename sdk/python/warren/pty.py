"""An exec on a terminal of its own: what `Sandbox.pty` returns.

    with sb.pty("sh", rows=24, cols=80) as term:
        term.read_until("# ")
        term.write("ls /\\n")
        print(term.read_until("# ").decode())
        term.resize(40, 120)
        term.write("exit 3\\n")
        assert term.wait().exit_code == 3

The terminal is the sandbox's own (its devpts): what is written is typed into it (``"\\x03"``
is Ctrl-C, which its line discipline turns into SIGINT for the foreground job), and what the
programs draw comes back as the raw bytes a terminal emulator would get.
"""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING, Any, Optional, Pattern, Union

from . import errors

if TYPE_CHECKING:  # pragma: no cover
    from .client import ExecResult, Sandbox

Expected = Union[str, bytes, Pattern[bytes]]


class Pty:
    """A running command with a terminal. Its output is read in the background from the
    exec's resumable stream; ``read``/``read_until`` consume it, ``output`` keeps all of it."""

    def __init__(self, sandbox: "Sandbox", exec_id: str):
        self.sandbox = sandbox
        self.exec_id = exec_id
        self._cond = threading.Condition()
        self._output = bytearray()
        self._pos = 0                       # what read/read_until have consumed
        self._result: Optional["ExecResult"] = None
        self._error: Optional[BaseException] = None
        self._reader = threading.Thread(target=self._follow, name=f"warren-pty-{exec_id}", daemon=True)
        self._reader.start()

    # -- output -----------------------------------------------------------
    def _follow(self) -> None:
        try:
            for ev in self.sandbox.follow(self.exec_id):
                with self._cond:
                    if ev.result is not None:
                        self._result = ev.result
                    else:
                        self._output += ev.data_bytes
                    self._cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to the reader of the output
            with self._cond:
                self._error = e
                self._cond.notify_all()

    @property
    def output(self) -> bytes:
        """Everything the terminal showed so far, read or not."""
        with self._cond:
            return bytes(self._output)

    @property
    def done(self) -> bool:
        with self._cond:
            return self._result is not None

    def read(self, timeout: Optional[float] = None) -> bytes:
        """What came since the last read; waits up to ``timeout`` (None: until something
        comes) for at least one byte. ``b""`` once the command ended and all was read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pos == len(self._output) and self._result is None and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return b""
                self._cond.wait(left)
            if self._pos == len(self._output) and self._error is not None:
                raise self._error
            data = bytes(self._output[self._pos:])
            self._pos = len(self._output)
            return data

    def read_until(self, expected: Expected, timeout: float = 30.0) -> bytes:
        """Everything up to and including the first match of ``expected`` (text, bytes or a
        compiled bytes regex) after what was already read. TimeoutError if it does not show
        within ``timeout``; EOFError if the command ends first."""
        if isinstance(expected, str):
            expected = expected.encode()
        pattern = re.compile(re.escape(expected)) if isinstance(expected, bytes) else expected
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                m = pattern.search(self._output, self._pos)
                if m:
                    data = bytes(self._output[self._pos:m.end()])
                    self._pos = m.end()
                    return data
                if self._error is not None:
                    raise self._error
                if self._result is not None:
                    raise EOFError(f"exec {self.exec_id} ended before {pattern.pattern!r} showed "
                                   f"(exit {self._result.exit_code})")
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = bytes(self._output[-200:])
                    raise TimeoutError(f"{pattern.pattern!r} did not show within {timeout}s; "
                                       f"the terminal ends with {tail!r}")
                self._cond.wait(left)

    # -- input ------------------------------------------------------------
    def write(self, data: Union[str, bytes], timeout: float = 30.0) -> None:
        """Types ``data`` into the terminal. While the program does not read (the server
        answers 429), waits and retries up to ``timeout``."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        for off in range(0, max(len(raw), 1), 1 << 20):
            self._send(raw[off:off + (1 << 20)], False, timeout)

    def send_eof(self) -> None:
        """The terminal's end-of-file (Ctrl-D at the start of a line)."""
        self._send(b"", True, 30.0)

    def _send(self, chunk: bytes, eof: bool, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sandbox.send_input(self.exec_id, chunk, eof=eof)
                return
            except errors.QuotaExceeded:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def resize(self, rows: int, cols: int) -> None:
        """A new window size: the programs get SIGWINCH and see it with TIOCGWINSZ."""
        self.sandbox.resize(self.exec_id, rows, cols)

    # -- end --------------------------------------------------------------
    def wait(self, timeout: Optional[float] = None) -> "ExecResult":
        """Waits for the command to end; its result (output is the terminal's, on stdout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._result is None:
                if self._error is not None:
                    raise self._error
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"exec {self.exec_id} still runs after {timeout}s")
                self._cond.wait(left)
            return self._result

    def kill(self, signal: str = "KILL") -> None:
        """Signals the command's process group (the whole session it leads)."""
        try:
            self.sandbox.signal(self.exec_id, signal)
        except errors.Conflict:
            pass  # it ended meanwhile

    def close(self) -> None:
        """Ends the command if it still runs, and the background reader with it."""
        if not self.done:
            self.kill()
            try:
                self.wait(timeout=30)
            except (TimeoutError, errors.WarrenError):
                pass

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Pty(exec_id={self.exec_id!r}, done={self.done!r})"
