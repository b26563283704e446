"""A small HTTP/1.1 transport: one keep-alive connection per thread."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import errors

USER_AGENT = "warren-python/0.1"

# Errors that mean "the kept-alive connection went stale before the server
# answered": the request is retried once on a fresh connection.
_STALE = (http.client.RemoteDisconnected, http.client.BadStatusLine,
          BrokenPipeError, ConnectionResetError, ConnectionAbortedError)

Query = Optional[Union[Mapping[str, Any], Sequence[Tuple[str, Any]]]]


def encode_query(query: Query) -> str:
    if not query:
        return ""
    items = query.items() if isinstance(query, Mapping) else query
    parts = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        parts.append(urllib.parse.quote(str(k), safe="") + "=" +
                     urllib.parse.quote(str(v), safe="/=:,@*"))
    return "?" + "&".join(parts) if parts else ""


def _json_default(o: Any) -> Any:
    # Objects of the SDK (Lease, Sandbox) serialise as their id.
    ident = getattr(o, "id", None)
    if isinstance(ident, str):
        return ident
    raise TypeError(f"cannot serialise {type(o).__name__} to JSON")


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, default=_json_default, separators=(",", ":")).encode()


class Transport:
    def __init__(self, url: str, token: Optional[str], timeout: Optional[float]):
        parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {url!r}")
        if not parts.hostname:
            raise ValueError(f"no host in URL {url!r}")
        self.url = url
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._local = threading.local()
        self._all_lock = threading.Lock()
        self._all: "set[http.client.HTTPConnection]" = set()

    # -- connections ------------------------------------------------------
    def new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.new_connection(timeout)
            self._local.conn = conn
            with self._all_lock:
                self._all.add(conn)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            with self._all_lock:
                self._all.discard(conn)
            try:
                conn.close()
            except Exception:
                pass

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, set()
        for c in conns:
            try:
                c.close()
            except Exception:
                pass

    def headers(self, extra: Optional[Mapping[str, str]] = None) -> dict:
        h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if extra:
            h.update(extra)
        return h

    def target(self, path: str, query: Query = None) -> str:
        return self.prefix + path + encode_query(query)

    def _unavailable(self, exc: BaseException, what: str = "") -> errors.Unavailable:
        where = f"{self.scheme}://{self.host}:{self.port}"
        msg = f"cannot reach {where}: {exc.__class__.__name__}: {exc}"
        if what:
            msg = f"{what}: {msg}"
        return errors.Unavailable("unavailable", msg, None)

    # -- requests ---------------------------------------------------------
    def request(self, method: str, path: str, *, query: Query = None,
                body: Optional[Union[bytes, Iterable[bytes]]] = None,
                headers: Optional[Mapping[str, str]] = None,
                timeout: Optional[float] = -1.0) -> Tuple[int, http.client.HTTPMessage, bytes]:
        """Send a request and read the whole response. Raises WarrenError for >= 400."""
        if timeout is not None and timeout < 0:
            timeout = self.timeout
        url = self.target(path, query)
        hdrs = self.headers(headers)
        retryable = body is None or isinstance(body, (bytes, bytearray, memoryview))
        for attempt in (0, 1):
            conn = self._conn(timeout)
            reused = conn.sock is not None
            try:
                conn.request(method, url, body=body, headers=hdrs)
                resp = conn.getresponse()
                data = resp.read()
            except _STALE as e:
                self._drop()
                if reused and retryable and attempt == 0:
                    continue
                raise self._unavailable(e, f"{method} {path}") from None
            except socket.timeout as e:
                self._drop()
                raise errors.Unavailable("unavailable", f"{method} {path}: timed out after {timeout}s", None) from e
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise self._unavailable(e, f"{method} {path}") from None
            if resp.will_close:
                self._drop()
            if resp.status >= 400:
                raise errors.error_from_response(resp.status, data)
            return resp.status, resp.headers, data
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, *, query: Query = None, body: Any = None,
             timeout: Optional[float] = -1.0) -> Any:
        payload = None
        headers = None
        if body is not None:
            payload = dumps(body)
            headers = {"Content-Type": "application/json"}
        status, _, data = self.request(method, path, query=query, body=payload,
                                       headers=headers, timeout=timeout)
        if not data or status == 204:
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise errors.InternalError("internal", f"{method} {path}: server sent invalid JSON: {data[:200]!r}", status) from None

    def json_status(self, method: str, path: str, *, body: Any = None,
                    timeout: Optional[float] = -1.0) -> Tuple[int, Any]:
        payload = dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else None
        status, _, data = self.request(method, path, body=payload, headers=headers, timeout=timeout)
        doc = None
        if data:
            try:
                doc = json.loads(data)
            except ValueError:
                raise errors.InternalError("internal", f"{method} {path}: server sent invalid JSON: {data[:200]!r}", status) from None
        return status, doc

    def open_stream(self, path: str, query: Query, timeout: Optional[float]):
        """GET on a dedicated connection; returns (conn, response) with the body unread."""
        conn = self.new_connection(timeout)
        try:
            conn.request("GET", self.target(path, query),
                         headers=self.headers({"Accept": "application/x-ndjson"}))
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise errors.Unavailable("unavailable", f"GET {path}: timed out after {timeout}s", None) from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._unavailable(e, f"GET {path}") from None
        if resp.status >= 400:
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException):
                data = b""
            conn.close()
            raise errors.error_from_response(resp.status, data)
        return conn, resp
