"""The synchronous Warren client."""

from __future__ import annotations

import base64
import http.client
import json
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import errors
from ._http import Transport
from .pty import Pty

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 600.0
ADMIN_TOKEN_PATH = "/var/lib/warren/admin.token"

Command = Union[str, Sequence[str]]


def _quote_id(ident: str) -> str:
    import urllib.parse
    return urllib.parse.quote(str(ident), safe="")


def default_url() -> str:
    return os.environ.get("WARREN_URL") or DEFAULT_URL


def default_token() -> Optional[str]:
    """WARREN_TOKEN, else $WARREN_HOME/token, else the server's admin token if readable."""
    tok = os.environ.get("WARREN_TOKEN")
    if tok:
        return tok.strip()
    home = os.environ.get("WARREN_HOME") or os.path.join(os.path.expanduser("~"), ".config", "warren")
    for path in (os.path.join(home, "token"), ADMIN_TOKEN_PATH):
        try:
            with open(path, "r", encoding="utf-8") as f:
                tok = f.read().strip()
        except OSError:
            continue
        if tok:
            return tok
    return None


class Record:
    """A server object: attribute and item access over the JSON it came from."""

    def __init__(self, data: Mapping[str, Any]):
        object.__setattr__(self, "_data", dict(data or {}))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_data":
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}") from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self._data))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


def _b64(s: Optional[str]) -> Optional[bytes]:
    if s is None:
        return None
    return base64.b64decode(s)


class ExecResult:
    """The outcome of one command run in a sandbox."""

    def __init__(self, data: Mapping[str, Any]):
        d = dict(data or {})
        self.raw: Dict[str, Any] = d
        self.exec_id: Optional[str] = d.get("exec_id")
        self.state: Optional[str] = d.get("state")
        self.exit_code: Optional[int] = d.get("exit_code")
        self.signal: Optional[str] = d.get("signal")
        self.timed_out: bool = bool(d.get("timed_out", False))
        self.stdout: str = d.get("stdout") or ""
        self.stderr: str = d.get("stderr") or ""
        self.stdout_truncated: bool = bool(d.get("stdout_truncated", False))
        self.stderr_truncated: bool = bool(d.get("stderr_truncated", False))
        self.duration_ms = d.get("duration_ms")
        self.replayed: bool = bool(d.get("replayed", False))
        # A recorded trajectory step that re-ran in a new sandbox with other output: what
        # differed (["exit_code", "stdout", ...]), and the re-run's outcome (or, when the
        # sandbox stops on divergence, the recorded one).
        self.diverged: bool = bool(d.get("diverged", False))
        self.differs: List[str] = list(d.get("differs") or [])
        self.rerun: Optional[Dict[str, Any]] = d.get("rerun")
        self.recorded: Optional[Dict[str, Any]] = d.get("recorded")
        out_b = _b64(d.get("stdout_b64"))
        err_b = _b64(d.get("stderr_b64"))
        self.stdout_bytes: bytes = out_b if out_b is not None else self.stdout.encode()
        self.stderr_bytes: bytes = err_b if err_b is not None else self.stderr.encode()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.signal

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __repr__(self) -> str:
        return (f"ExecResult(exec_id={self.exec_id!r}, exit_code={self.exit_code!r}, "
                f"signal={self.signal!r}, timed_out={self.timed_out!r}, "
                f"stdout={self.stdout[:80]!r}, stderr={self.stderr[:80]!r}, "
                f"duration_ms={self.duration_ms!r})")


class StreamEvent:
    """One line of an exec's output stream; the last one carries ``result``."""

    def __init__(self, data: Mapping[str, Any]):
        self.raw: Dict[str, Any] = dict(data)
        self.seq: Optional[int] = data.get("seq")
        self.stream: Optional[str] = data.get("stream")
        self.data: str = data.get("data") or ""
        raw = _b64(data.get("data_b64"))
        self.data_bytes: bytes = raw if raw is not None else self.data.encode()
        res = data.get("result")
        self.result: Optional[ExecResult] = ExecResult(res) if isinstance(res, Mapping) else None

    def __repr__(self) -> str:
        if self.result is not None:
            return f"StreamEvent(seq={self.seq!r}, result={self.result!r})"
        return f"StreamEvent(seq={self.seq!r}, stream={self.stream!r}, data={self.data!r})"


class _Fields(dict):
    """A JSON object inside a record: a dict whose keys also read as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _fields(v: Any) -> Any:
    if isinstance(v, dict):
        return _Fields({k: _fields(x) for k, x in v.items()})
    if isinstance(v, list):
        return [_fields(x) for x in v]
    return v


class CallResult(Record):
    """`res.verdict`, `res.compile.ok`, `res.cases[0].verdict` (or item access throughout)."""

    def __init__(self, data: Mapping[str, Any]):
        super().__init__({k: _fields(v) for k, v in dict(data or {}).items()})


class Layer(Record):
    pass


def _exec_body(cmd: Command, *, stdin=None, env=None, cwd=None, timeout=None,
               max_output_bytes=None, binary=False, step=None, wait=True,
               stdin_open=False) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if isinstance(cmd, str):
        body["cmd"] = cmd
    elif isinstance(cmd, (list, tuple)):
        body["argv"] = [str(a) for a in cmd]
    else:
        raise TypeError("cmd must be a str (shell command) or a list of arguments")
    if stdin is not None:
        if isinstance(stdin, (bytes, bytearray, memoryview)):
            body["stdin_b64"] = base64.b64encode(bytes(stdin)).decode()
        else:
            body["stdin"] = str(stdin)
    if env is not None:
        body["env"] = {str(k): str(v) for k, v in dict(env).items()}
    if cwd is not None:
        body["cwd"] = str(cwd)
    if timeout is not None:
        body["timeout_s"] = timeout
    if max_output_bytes is not None:
        body["max_output_bytes"] = int(max_output_bytes)
    if binary:
        body["binary"] = True
    if step is not None:
        body["step"] = step
    if not wait:
        body["wait"] = False
    if stdin_open:
        body["stdin_open"] = True
    return body


class Sandbox:
    """A sandbox on the server. Use it as a context manager to delete it on exit."""

    def __init__(self, client: "Client", data: Mapping[str, Any]):
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_data", dict(data))
        if "id" not in self._data:
            raise errors.InternalError("internal", f"server sent a sandbox without an id: {data!r}", None)

    # -- attributes -------------------------------------------------------
    @property
    def id(self) -> str:
        return self._data["id"]

    @property
    def state(self) -> Optional[str]:
        return self._data.get("state")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_data", "_client"):
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"Sandbox has no attribute {name!r}") from None

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self._data))

    def _set(self, data: Optional[Mapping[str, Any]]) -> "Sandbox":
        if isinstance(data, Mapping) and data.get("id"):
            object.__setattr__(self, "_data", dict(data))
        return self

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, state={self.state!r}, image={self._data.get('image')!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete(missing_ok=True)

    @property
    def _path(self) -> str:
        return "/v1/sandboxes/" + _quote_id(self.id)

    def _http(self):
        return self._client._t

    def _exec_timeout(self, timeout: Optional[float]) -> Optional[float]:
        base = self._client.timeout
        if timeout is None:
            return base
        if base is None:
            return None
        return max(base, float(timeout) + 60.0)

    # -- lifecycle --------------------------------------------------------
    def refresh(self) -> "Sandbox":
        return self._set(self._http().json("GET", self._path))

    def delete(self, missing_ok: bool = False) -> None:
        try:
            self._http().request("DELETE", self._path)
        except errors.NotFound:
            if not missing_ok:
                raise
        self._data["state"] = "deleted"

    def pause(self) -> "Sandbox":
        return self._set(self._http().json("POST", self._path + "/pause"))

    def resume(self) -> "Sandbox":
        return self._set(self._http().json("POST", self._path + "/resume"))

    def set_network(self, allow: Optional[Sequence[str]] = None, *, mode: Optional[str] = None) -> "Sandbox":
        """None -> no network; a list of rules -> egress limited to those rules."""
        if allow is None:
            policy = {"mode": mode or "none", "allow": []}
        else:
            if isinstance(allow, str):
                allow = [allow]
            policy = {"mode": mode or "egress", "allow": [str(a) for a in allow]}
        return self._set(self._http().json("PUT", self._path + "/network", body=policy))

    def set_filesystem(self, read_only: Optional[Sequence[str]] = None,
                       writable: Optional[Sequence[str]] = None) -> "Sandbox":
        """Which trees the occupant cannot change, root included (and which inside them it can).

        Applies at once to every process in the sandbox. ``set_filesystem()`` makes everything
        writable again; ``set_filesystem(["/"], writable=["/work", "/tmp"])`` is an evaluation
        stage where only the workspace and /tmp can change.
        """
        if isinstance(read_only, str):
            read_only = [read_only]
        if isinstance(writable, str):
            writable = [writable]
        policy = {"read_only": [str(p) for p in read_only or []], "writable": [str(p) for p in writable or []]}
        return self._set(self._http().json("PUT", self._path + "/filesystem", body=policy))

    def snapshot(self, tag: str, *, max_mb: Optional[int] = None) -> "Layer":
        """The sandbox's files as a workspace layer named ``tag`` (NAME:TAG).

        The sandbox is frozen while its files are read and keeps running. The layer holds its
        workspace layer (if it had one) and every change since, deletions included, so
        ``client.create(image=<same image>, workspace=tag)`` starts with exactly this tree; a
        snapshot of that sandbox stacks the same way. ``max_mb`` refuses (``QuotaError``) a
        snapshot holding more file data than that. The result's ``snapshot`` says how many
        entries and bytes it took and how long.
        """
        body: Dict[str, Any] = {"tag": str(tag)}
        if max_mb is not None:
            body["max_mb"] = int(max_mb)
        return Layer(self._http().json("POST", self._path + "/snapshot", body=body) or {})

    def fork(self, n: int = 1, *, tag: Optional[str] = None,
             progress: Optional[Any] = None, poll_interval: float = 0.5) -> List["Sandbox"]:
        """``n`` new sandboxes whose files are this one's now (POST .../fork): all or none.

        Each child has its own id, network and limits (this sandbox's spec), and its
        ``lineage`` names this sandbox and the snapshot it started from; this sandbox keeps
        running, untouched. Containers fork their files, not their processes; a microVM's
        children also carry on its memory and running processes (``lineage["memory"]`` is
        true). ``tag`` also names the snapshot. ``progress(ready, n)`` is called while the children are made (from
        this thread, every ``poll_interval`` seconds) and once at the end.
        """
        body: Dict[str, Any] = {"count": int(n)}
        if tag is not None:
            body["tag"] = str(tag)
        timeout = self._client.timeout
        if timeout is not None:
            timeout = max(timeout, 120.0 + 2.0 * int(n))
        if progress is None:
            doc = self._http().json("POST", self._path + "/fork", body=body, timeout=timeout) or {}
        else:
            done: Dict[str, Any] = {}

            def call() -> None:
                try:
                    done["doc"] = self._http().json("POST", self._path + "/fork", body=body, timeout=timeout)
                except BaseException as e:  # re-raised in the caller's thread
                    done["error"] = e

            t = threading.Thread(target=call, name="warren-fork", daemon=True)
            t.start()
            while t.is_alive():
                t.join(poll_interval)
                if t.is_alive():
                    try:
                        ready = [c for c in self._client.list(parent=self.id) if c.state == "running"]
                        progress(len(ready), int(n))
                    except errors.WarrenError:
                        pass  # progress is best effort; the fork's own answer decides
            if "error" in done:
                raise done["error"]
            doc = done.get("doc") or {}
        children = [Sandbox(self._client, d) for d in doc.get("sandboxes") or []]
        if progress is not None:
            progress(len(children), int(n))
        return children

    def changes(self, path: Optional[str] = None, *, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """What the occupant changed relative to the sandbox's layers, at or below ``path``.

        Each item: ``path``, ``change`` (added, modified, deleted), ``type`` (file, dir, symlink,
        other), ``size``, ``mode`` and, for a modified or deleted entry, the ``layer`` (ref,
        role, digest) it shadows. Raises ``warren.errors.WarrenError`` if the server had more
        changes than ``limit`` (default 10000) rather than returning a partial list silently.
        """
        query = []
        if path is not None:
            query.append(("path", path))
        if limit is not None:
            query.append(("limit", str(int(limit))))
        doc = self._http().json("GET", self._path + "/changes", query=query or None)
        if doc.get("truncated"):
            raise errors.WarrenError("truncated", f"changes of {self.id}: more than {limit or 10000}; raise limit")
        return list(doc.get("changes", []))

    # -- commands ---------------------------------------------------------
    def run(self, cmd: Command, *, stdin=None, env=None, cwd=None, timeout=None,
            max_output_bytes=None, binary: bool = False, step=None) -> ExecResult:
        """Run a command and wait for it. A str runs through the shell; a list is argv."""
        body = _exec_body(cmd, stdin=stdin, env=env, cwd=cwd, timeout=timeout,
                          max_output_bytes=max_output_bytes, binary=binary, step=step)
        doc = self._http().json("POST", self._path + "/exec", body=body,
                                timeout=self._exec_timeout(timeout))
        return ExecResult(doc or {})

    def start(self, cmd: Command, *, stdin=None, env=None, cwd=None, timeout=None,
              max_output_bytes=None, binary: bool = False, step=None,
              stdin_open: bool = False) -> str:
        """Start a command without waiting; returns its exec id. With ``stdin_open``, its
        stdin stays open for ``send_input`` (after ``stdin``, if given)."""
        body = _exec_body(cmd, stdin=stdin, env=env, cwd=cwd, timeout=timeout,
                          max_output_bytes=max_output_bytes, binary=binary, step=step, wait=False,
                          stdin_open=stdin_open)
        return self._start_body(body)

    def _start_body(self, body: Dict[str, Any]) -> str:
        status, doc = self._http().json_status("POST", self._path + "/exec", body=body)
        if not isinstance(doc, Mapping) or not doc.get("exec_id"):
            raise errors.InternalError("internal", f"exec answered {status} without an exec_id: {doc!r}", status)
        return doc["exec_id"]

    def pty(self, cmd: Command = "sh", *, rows: int = 24, cols: int = 80, env=None, cwd=None,
            timeout=None, stdin=None) -> Pty:
        """Start ``cmd`` on a terminal of its own, ``rows`` x ``cols``: a :class:`warren.pty.Pty`
        to type into, read from, resize and wait on. No deadline unless ``timeout``."""
        body = _exec_body(cmd, stdin=stdin, env=env, cwd=cwd, timeout=timeout, wait=False)
        body.update({"tty": True, "rows": int(rows), "cols": int(cols)})
        return Pty(self, self._start_body(body))

    def send_input(self, exec_id: str, data: Union[str, bytes] = b"", eof: bool = False) -> None:
        """Input for a command started with ``stdin_open`` or on a terminal. QuotaExceeded
        (429) while it does not read what it has; Conflict once it ended."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        body: Dict[str, Any] = {"data_b64": base64.b64encode(raw).decode()}
        if eof:
            body["eof"] = True
        self._http().request("POST", self._path + "/execs/" + _quote_id(exec_id) + "/input",
                             body=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})

    def resize(self, exec_id: str, rows: int, cols: int) -> None:
        """A new size for the terminal of a command started by ``pty``."""
        self._http().request("POST", self._path + "/execs/" + _quote_id(exec_id) + "/resize",
                             body=json.dumps({"rows": int(rows), "cols": int(cols)}).encode(),
                             headers={"Content-Type": "application/json"})

    def exec_result(self, exec_id: str) -> ExecResult:
        return ExecResult(self._http().json("GET", self._path + "/execs/" + _quote_id(exec_id)) or {})

    def signal(self, exec_id: str, signal: str = "TERM") -> None:
        self._http().request("POST", self._path + "/execs/" + _quote_id(exec_id) + "/signal",
                             body=json.dumps({"signal": signal}).encode(),
                             headers={"Content-Type": "application/json"})

    def stream(self, cmd: Command, *, stdin=None, env=None, cwd=None, timeout=None,
               max_output_bytes=None, binary: bool = False, step=None) -> Iterator[StreamEvent]:
        """Run a command, yielding its output as it comes; the last event has ``.result``."""
        exec_id = self.start(cmd, stdin=stdin, env=env, cwd=cwd, timeout=timeout,
                             max_output_bytes=max_output_bytes, binary=binary, step=step)
        yield from self.follow(exec_id)

    def follow(self, exec_id: str, after: int = 0, retries: int = 5) -> Iterator[StreamEvent]:
        """Yield the output events of an exec after sequence number ``after``.

        A dropped connection is resumed with ``?after=<last seq>``; ``retries``
        consecutive drops without progress give up with Unavailable.
        """
        path = self._path + "/execs/" + _quote_id(exec_id) + "/stream"
        http_ = self._http()
        failures = 0
        last_exc: Optional[BaseException] = None
        while True:
            try:
                conn, resp = http_.open_stream(path, [("after", str(after))], self._client.timeout)
            except errors.Unavailable as e:
                last_exc = e
                failures += 1
                if failures > retries:
                    raise
                time.sleep(min(0.1 * 2 ** failures, 2.0))
                continue
            progressed = False
            try:
                while True:
                    line = resp.readline()
                    if not line:
                        break                  # EOF before the result line
                    if not line.endswith(b"\n"):
                        break                  # a partial line: the connection dropped
                    line = line.strip()
                    if not line:
                        continue
                    doc = json.loads(line)
                    if not isinstance(doc, dict) or doc.get("heartbeat"):
                        continue               # a quiet command's sign of life
                    if "result" in doc:
                        yield StreamEvent(doc)
                        return
                    seq = doc.get("seq")
                    if isinstance(seq, int):
                        if seq <= after:
                            continue           # already delivered before a reconnect
                        after = seq
                    progressed = True
                    yield StreamEvent(doc)
            except (OSError, http.client.HTTPException, ValueError) as e:
                last_exc = e
            finally:
                conn.close()
            failures = 0 if progressed else failures + 1
            if failures > retries:
                raise errors.Unavailable(
                    "unavailable", f"output stream of exec {exec_id} kept dropping"
                    + (f": {last_exc}" if last_exc else ""), None)
            time.sleep(min(0.05 * 2 ** failures, 2.0))

    # -- desktop ----------------------------------------------------------
    def screenshot(self) -> bytes:
        """The screen of a sandbox created with ``display``, as PNG bytes."""
        _, _, data = self._http().request("GET", self._path + "/screen", headers={"Accept": "image/png"})
        return data

    def input(self, actions: Sequence[Mapping[str, Any]]) -> None:
        """Performs input ``actions`` in order (see docs/api.md): ``{"type": "move", "x", "y"}``,
        ``click`` (``x``, ``y``, ``button``, ``count``), ``mouse_down``/``mouse_up``, ``drag``
        (``from``, ``to``), ``scroll`` (``dx``, ``dy``), ``key`` (``keys``: "ctrl+s"),
        ``type`` (``text``), ``wait`` (``ms``)."""
        self._http().request("POST", self._path + "/input",
                             body=json.dumps({"actions": [dict(a) for a in actions]}).encode(),
                             headers={"Content-Type": "application/json"})

    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        self.input([{"type": "click", "x": int(x), "y": int(y), "button": button, "count": int(count)}])

    def move(self, x: int, y: int) -> None:
        self.input([{"type": "move", "x": int(x), "y": int(y)}])

    def drag(self, x1: int, y1: int, x2: int, y2: int, button: str = "left") -> None:
        self.input([{"type": "drag", "from": [int(x1), int(y1)], "to": [int(x2), int(y2)], "button": button}])

    def scroll(self, x: int, y: int, dy: int = 0, dx: int = 0) -> None:
        """Wheel steps at (x, y): ``dy`` > 0 down, < 0 up; ``dx`` > 0 right."""
        self.input([{"type": "scroll", "x": int(x), "y": int(y), "dx": int(dx), "dy": int(dy)}])

    def type(self, text: str) -> None:
        """Types ``text`` into whatever has the keyboard focus."""
        self.input([{"type": "type", "text": str(text)}])

    def key(self, combo: str, repeat: int = 1) -> None:
        """Presses a key combination, e.g. ``"ctrl+s"``, ``"Return"``, ``"alt+F4"``."""
        self.input([{"type": "key", "keys": str(combo), "repeat": int(repeat)}])

    # -- files ------------------------------------------------------------
    def write_file(self, path: str, data: Union[str, bytes], mode: int = 0o644) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._http().request("PUT", self._path + "/files",
                             query=[("path", path), ("mode", format(int(mode) & 0o7777, "04o"))],
                             body=bytes(data), headers={"Content-Type": "application/octet-stream"})

    def read_file(self, path: str) -> bytes:
        _, _, data = self._http().request("GET", self._path + "/files", query=[("path", path)],
                                          headers={"Accept": "application/octet-stream"})
        return data

    def put_archive(self, path: str, tar: bytes) -> None:
        self._http().request("PUT", self._path + "/archive", query=[("path", path)], body=bytes(tar),
                             headers={"Content-Type": "application/x-tar"})

    def get_archive(self, path: str) -> bytes:
        _, _, data = self._http().request("GET", self._path + "/archive", query=[("path", path)],
                                          headers={"Accept": "application/x-tar"})
        return data


class Lease:
    """A lease on the server, renewed in a background thread until closed."""

    def __init__(self, client: "Client", ttl: float, data: Mapping[str, Any],
                 renew_every: Optional[float] = None):
        self._client = client
        self.ttl = ttl
        self.id: str = data["id"]
        self.expires_at = data.get("expires_at")
        self.raw = dict(data)
        self.error: Optional[BaseException] = None
        # Sandboxes of this lease the server reported lost (their node went), as of the last
        # renewal.
        self.lost: List[str] = list(data.get("lost") or [])
        self._stop = threading.Event()
        self._closed = False
        interval = renew_every if renew_every is not None else max(ttl / 3.0, 0.5)
        self._thread = threading.Thread(target=self._loop, args=(interval,),
                                        name=f"warren-lease-{self.id}", daemon=True)
        self._thread.start()

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"Lease(id={self.id!r}, expires_at={self.expires_at!r})"

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.renew()
                self.error = None
            except errors.NotFound as e:
                self.error = e       # expired or revoked: nothing left to renew
                return
            except errors.WarrenError as e:
                self.error = e       # try again at the next tick

    def renew(self) -> None:
        doc = self._client._t.json("POST", "/v1/leases/" + _quote_id(self.id) + "/renew",
                                   body={"ttl_s": self.ttl})
        if isinstance(doc, Mapping) and "expires_at" in doc:
            self.expires_at = doc["expires_at"]
            self.lost = list(doc.get("lost") or [])

    def close(self) -> None:
        """Stop renewing and release the lease (its sandboxes are then reaped)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        try:
            self._client._t.request("DELETE", "/v1/leases/" + _quote_id(self.id))
        except errors.NotFound:
            pass

    release = close

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _spec(spec: Optional[Mapping[str, Any]], kw: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = dict(spec or {})
    out.update(kw)
    for key in ("lease",):
        v = out.get(key)
        if v is not None and not isinstance(v, str):
            out[key] = getattr(v, "id", v)
    return out


class Client:
    """A client of one Warren server.

    ``url`` defaults to $WARREN_URL, else http://127.0.0.1:7070; ``token`` to
    $WARREN_TOKEN, else $WARREN_HOME/token, else /var/lib/warren/admin.token.
    ``timeout`` is the socket timeout in seconds for ordinary calls.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT):
        self.url = url or default_url()
        self.token = token if token is not None else default_token()
        self.timeout = timeout
        self._t = Transport(self.url, self.token, timeout)

    def __repr__(self) -> str:
        return f"warren.Client(url={self.url!r})"

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- sandboxes --------------------------------------------------------
    def create(self, spec: Optional[Mapping[str, Any]] = None, **kw: Any) -> Sandbox:
        """Create a sandbox (POST /v1/sandboxes) from a SandboxSpec given as keywords."""
        doc = self._t.json("POST", "/v1/sandboxes", body=_spec(spec, kw))
        return Sandbox(self, doc)

    def sandbox(self, spec: Optional[Mapping[str, Any]] = None, **kw: Any) -> Sandbox:
        """Like create(); meant for ``with client.sandbox(...) as sb:`` (deleted on exit)."""
        return self.create(spec, **kw)

    def create_many(self, n: int, spec: Optional[Mapping[str, Any]] = None, **kw: Any) -> List[Sandbox]:
        """Create ``n`` sandboxes in one batch call.

        Returns the created sandboxes; ``.errors`` on the returned list holds
        ``(index, WarrenError)`` for the ones that failed. When none at all
        could be created, the first error is raised.
        """
        doc = self._t.json("POST", "/v1/sandboxes:batch", body={"count": int(n), "spec": _spec(spec, kw)})
        doc = doc or {}
        out = _BatchList(Sandbox(self, d) for d in doc.get("sandboxes") or [])
        for e in doc.get("errors") or []:
            err = e.get("error") or {}
            exc = errors.error_from_response(0, json.dumps({"error": err}).encode())
            exc.status = None
            out.errors.append((e.get("index"), exc))
        if n > 0 and not out and out.errors:
            raise out.errors[0][1]
        return out

    def get(self, sandbox_id: str) -> Sandbox:
        return Sandbox(self, self._t.json("GET", "/v1/sandboxes/" + _quote_id(sandbox_id)))

    def list(self, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None,
             parent: Optional[str] = None) -> List[Sandbox]:
        """Your sandboxes, those with all of ``labels``, in ``state``, or forked from ``parent``."""
        query = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        if state:
            query.append(("state", state))
        if parent:
            query.append(("parent", parent))
        doc = self._t.json("GET", "/v1/sandboxes", query=query) or {}
        return [Sandbox(self, d) for d in doc.get("sandboxes") or []]

    # -- function calls ---------------------------------------------------
    def call(self, language: Optional[str] = None, code: Optional[str] = None, **kw: Any) -> CallResult:
        """Run a snippet of code (POST /v1/calls); keywords are CallRequest fields."""
        body = {k: v for k, v in kw.items() if v is not None}
        if language is not None:
            body["language"] = language
        if code is not None:
            body["code"] = code
        timeout = self.timeout
        if timeout is not None and isinstance(body.get("timeout_s"), (int, float)):
            n_cases = len(body.get("cases") or []) or 1
            timeout = max(timeout, body["timeout_s"] * n_cases + 120.0)
        return CallResult(self._t.json("POST", "/v1/calls", body=body, timeout=timeout) or {})

    def call_many(self, calls: Sequence[Mapping[str, Any]]) -> List[CallResult]:
        doc = self._t.json("POST", "/v1/calls:batch", body={"calls": [dict(c) for c in calls]}) or {}
        return [CallResult(r) for r in doc.get("results") or []]

    # -- leases -----------------------------------------------------------
    def lease(self, ttl: float = 60, renew_every: Optional[float] = None) -> Lease:
        """Take a lease (POST /v1/leases); renewed in the background until closed."""
        doc = self._t.json("POST", "/v1/leases", body={"ttl_s": ttl})
        return Lease(self, ttl, doc, renew_every=renew_every)

    # -- layers -----------------------------------------------------------
    def layers(self) -> List[Layer]:
        doc = self._t.json("GET", "/v1/layers") or {}
        return [Layer(d) for d in doc.get("layers") or []]

    def push_layer(self, name: str, tag: str, data: bytes, kind: str = "base") -> Layer:
        """Upload a layer: ``data`` is a tar stream or an EROFS image."""
        _, _, body = self._t.request("POST", "/v1/layers",
                                     query=[("name", name), ("tag", tag), ("kind", kind)],
                                     body=bytes(data), headers={"Content-Type": "application/octet-stream"})
        return Layer(json.loads(body) if body else {})

    def inspect_layer(self, ref: str) -> Layer:
        """A layer given as NAME:TAG, with how it is stored (``format``: whole or chunked; for
        chunked, ``chunks``, ``chunk_size``, ``meta_bytes``, ``chunk_bytes``) and ``on_demand``:
        per node that read it on demand, what it read and fetched (GET /v1/layers/{ref})."""
        return Layer(self._t.json("GET", "/v1/layers/" + _quote_id(ref).replace("%3A", ":")) or {})

    def delete_layer(self, ref: str) -> None:
        """Delete a layer given as NAME:TAG."""
        self._t.request("DELETE", "/v1/layers/" + _quote_id(ref).replace("%3A", ":"))

    # -- misc -------------------------------------------------------------
    def health(self) -> Dict[str, Any]:
        return self._t.json("GET", "/healthz") or {}

    def nodes(self) -> List[Record]:
        doc = self._t.json("GET", "/v1/nodes") or {}
        return [Record(d) for d in doc.get("nodes") or []]

    def trajectory(self, trajectory_id: str) -> Record:
        return Record(self._t.json("GET", "/v1/trajectories/" + _quote_id(trajectory_id)) or {})

    def metrics(self) -> str:
        _, _, data = self._t.request("GET", "/metrics", headers={"Accept": "text/plain"})
        return data.decode("utf-8", "replace")


class _BatchList(list):
    def __init__(self, items=()):
        super().__init__(items)
        self.errors: list = []
