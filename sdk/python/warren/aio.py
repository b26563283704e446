"""asyncio flavour of the client: the same methods as coroutines.

Each call runs the synchronous client in a worker thread (asyncio.to_thread);
every worker thread keeps its own keep-alive connection.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence

from .client import (DEFAULT_TIMEOUT, CallResult, Client, Command, ExecResult, Layer, Lease,
                     Record, Sandbox, StreamEvent)
from .pty import Pty

_END = object()


class _AwaitableContext:
    """The result of a factory usable both as ``await f()`` and ``async with f() as x``."""

    def __init__(self, make, close):
        self._make = make
        self._close = close
        self._obj = None

    def __await__(self):
        return self._make().__await__()

    async def __aenter__(self):
        self._obj = await self._make()
        return self._obj

    async def __aexit__(self, *exc: Any) -> None:
        if self._obj is not None:
            await self._close(self._obj)


async def _iterate(it) -> AsyncIterator[Any]:
    try:
        while True:
            item = await asyncio.to_thread(next, it, _END)
            if item is _END:
                return
            yield item
    finally:
        try:
            await asyncio.to_thread(it.close)
        except (ValueError, RuntimeError):
            pass


class AsyncSandbox:
    """Async twin of :class:`warren.Sandbox`."""

    def __init__(self, sandbox: Sandbox):
        object.__setattr__(self, "sync", sandbox)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "sync":
            raise AttributeError(name)
        return getattr(self.sync, name)

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def state(self) -> Optional[str]:
        return self.sync.state

    def __repr__(self) -> str:
        return "Async" + repr(self.sync)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.delete(missing_ok=True)

    async def refresh(self) -> "AsyncSandbox":
        await asyncio.to_thread(self.sync.refresh)
        return self

    async def delete(self, missing_ok: bool = False) -> None:
        await asyncio.to_thread(self.sync.delete, missing_ok)

    async def pause(self) -> "AsyncSandbox":
        await asyncio.to_thread(self.sync.pause)
        return self

    async def resume(self) -> "AsyncSandbox":
        await asyncio.to_thread(self.sync.resume)
        return self

    async def set_network(self, allow: Optional[Sequence[str]] = None, *, mode: Optional[str] = None) -> "AsyncSandbox":
        await asyncio.to_thread(self.sync.set_network, allow, mode=mode)
        return self

    async def set_filesystem(self, read_only: Optional[Sequence[str]] = None,
                             writable: Optional[Sequence[str]] = None) -> "AsyncSandbox":
        await asyncio.to_thread(self.sync.set_filesystem, read_only, writable)
        return self

    async def snapshot(self, tag: str, *, max_mb: Optional[int] = None) -> Any:
        return await asyncio.to_thread(self.sync.snapshot, tag, max_mb=max_mb)

    async def fork(self, n: int = 1, *, tag: Optional[str] = None, progress: Optional[Any] = None) -> List["AsyncSandbox"]:
        children = await asyncio.to_thread(self.sync.fork, n, tag=tag, progress=progress)
        return [AsyncSandbox(c) for c in children]

    async def changes(self, path: Optional[str] = None, *, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.sync.changes, path, limit=limit)

    async def run(self, cmd: Command, **kw: Any) -> ExecResult:
        return await asyncio.to_thread(self.sync.run, cmd, **kw)

    async def start(self, cmd: Command, **kw: Any) -> str:
        return await asyncio.to_thread(self.sync.start, cmd, **kw)

    async def pty(self, cmd: Command = "sh", **kw: Any) -> Pty:
        """The same :class:`warren.Pty` as the sync client's (its reads and writes block: call
        them through ``asyncio.to_thread`` in a loop that must not wait)."""
        return await asyncio.to_thread(self.sync.pty, cmd, **kw)

    async def send_input(self, exec_id: str, data=b"", eof: bool = False) -> None:
        await asyncio.to_thread(self.sync.send_input, exec_id, data, eof)

    async def resize(self, exec_id: str, rows: int, cols: int) -> None:
        await asyncio.to_thread(self.sync.resize, exec_id, rows, cols)

    async def screenshot(self) -> bytes:
        return await asyncio.to_thread(self.sync.screenshot)

    async def input(self, actions) -> None:
        await asyncio.to_thread(self.sync.input, actions)

    async def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        await asyncio.to_thread(self.sync.click, x, y, button, count)

    async def type(self, text: str) -> None:
        await asyncio.to_thread(self.sync.type, text)

    async def key(self, combo: str, repeat: int = 1) -> None:
        await asyncio.to_thread(self.sync.key, combo, repeat)

    async def exec_result(self, exec_id: str) -> ExecResult:
        return await asyncio.to_thread(self.sync.exec_result, exec_id)

    async def signal(self, exec_id: str, signal: str = "TERM") -> None:
        await asyncio.to_thread(self.sync.signal, exec_id, signal)

    async def stream(self, cmd: Command, **kw: Any) -> AsyncIterator[StreamEvent]:
        async for ev in _iterate(self.sync.stream(cmd, **kw)):
            yield ev

    async def follow(self, exec_id: str, after: int = 0, retries: int = 5) -> AsyncIterator[StreamEvent]:
        async for ev in _iterate(self.sync.follow(exec_id, after, retries)):
            yield ev

    async def write_file(self, path: str, data, mode: int = 0o644) -> None:
        await asyncio.to_thread(self.sync.write_file, path, data, mode)

    async def read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(self.sync.read_file, path)

    async def put_archive(self, path: str, tar: bytes) -> None:
        await asyncio.to_thread(self.sync.put_archive, path, tar)

    async def get_archive(self, path: str) -> bytes:
        return await asyncio.to_thread(self.sync.get_archive, path)


class AsyncLease:
    """Async twin of :class:`warren.Lease` (renewal still runs in a thread)."""

    def __init__(self, lease: Lease):
        self.sync = lease
        self.id = lease.id

    @property
    def expires_at(self):
        return self.sync.expires_at

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return "Async" + repr(self.sync)

    async def renew(self) -> None:
        await asyncio.to_thread(self.sync.renew)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncClient:
    """Async twin of :class:`warren.Client`; same arguments and methods."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT):
        self.sync = Client(url=url, token=token, timeout=timeout)
        self.url = self.sync.url

    def __repr__(self) -> str:
        return f"warren.AsyncClient(url={self.url!r})"

    async def close(self) -> None:
        self.sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def create(self, spec: Optional[Mapping[str, Any]] = None, **kw: Any) -> AsyncSandbox:
        return AsyncSandbox(await asyncio.to_thread(self.sync.create, spec, **kw))

    def sandbox(self, spec: Optional[Mapping[str, Any]] = None, **kw: Any) -> _AwaitableContext:
        """``sb = await client.sandbox(...)`` or ``async with client.sandbox(...) as sb``."""
        async def close(sb: AsyncSandbox) -> None:
            await sb.delete(missing_ok=True)
        return _AwaitableContext(lambda: self.create(spec, **kw), close)

    async def create_many(self, n: int, spec: Optional[Mapping[str, Any]] = None, **kw: Any) -> List[AsyncSandbox]:
        res = await asyncio.to_thread(self.sync.create_many, n, spec, **kw)
        out = _AsyncBatchList(AsyncSandbox(s) for s in res)
        out.errors = list(getattr(res, "errors", []))
        return out

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        return AsyncSandbox(await asyncio.to_thread(self.sync.get, sandbox_id))

    async def list(self, labels: Optional[Mapping[str, str]] = None, state: Optional[str] = None,
                   parent: Optional[str] = None) -> List[AsyncSandbox]:
        return [AsyncSandbox(s) for s in await asyncio.to_thread(self.sync.list, labels, state, parent)]

    async def call(self, language: Optional[str] = None, code: Optional[str] = None, **kw: Any) -> CallResult:
        return await asyncio.to_thread(self.sync.call, language, code, **kw)

    async def call_many(self, calls: Sequence[Mapping[str, Any]]) -> List[CallResult]:
        return await asyncio.to_thread(self.sync.call_many, calls)

    def lease(self, ttl: float = 60, renew_every: Optional[float] = None) -> _AwaitableContext:
        """``lease = await client.lease()`` or ``async with client.lease() as lease``."""
        async def make() -> AsyncLease:
            return AsyncLease(await asyncio.to_thread(self.sync.lease, ttl, renew_every))

        async def close(lease: AsyncLease) -> None:
            await lease.close()
        return _AwaitableContext(make, close)

    async def layers(self) -> List[Layer]:
        return await asyncio.to_thread(self.sync.layers)

    async def push_layer(self, name: str, tag: str, data: bytes, kind: str = "base") -> Layer:
        return await asyncio.to_thread(self.sync.push_layer, name, tag, data, kind)

    async def inspect_layer(self, ref: str) -> Layer:
        return await asyncio.to_thread(self.sync.inspect_layer, ref)

    async def delete_layer(self, ref: str) -> None:
        await asyncio.to_thread(self.sync.delete_layer, ref)

    async def health(self) -> dict:
        return await asyncio.to_thread(self.sync.health)

    async def nodes(self) -> List[Record]:
        return await asyncio.to_thread(self.sync.nodes)

    async def trajectory(self, trajectory_id: str) -> Record:
        return await asyncio.to_thread(self.sync.trajectory, trajectory_id)

    async def metrics(self) -> str:
        return await asyncio.to_thread(self.sync.metrics)


class _AsyncBatchList(list):
    errors: list = []
