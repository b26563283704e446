"""Helpers for the security tier (imported by conftest.py and the tests)."""

from __future__ import annotations

import json
from typing import Iterable, List, Optional

import e2e_util as u

IN_SANDBOX_ATTACK = "/usr/local/bin/attack"
IN_SANDBOX_PROBE = "/usr/local/bin/probe"


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------
def parse_results(stdout: str) -> List[dict]:
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def pick(results: Iterable[dict], attack: str, **match) -> List[dict]:
    return [r for r in results
            if r.get("attack") == attack and all(r.get(k) == v for k, v in match.items())]


def one(results: Iterable[dict], attack: str, **match) -> dict:
    found = pick(results, attack, **match)
    assert found, f"no result for {attack} {match or ''} in {list(results)!r}"
    return found[0]


def denied(r: dict, errnos=("EPERM",)) -> bool:
    return r.get("ret", 0) < 0 and (r.get("errno") in errnos or "child_signal" in r)


class Sandbox:
    """A sandbox made through the HTTP API, with the attack and probe binaries inside."""

    def __init__(self, server, sid: str):
        self.server = server
        self.id = sid

    def exec(self, argv: List[str], timeout_s: float = 60, http_timeout: Optional[float] = None,
             **extra) -> dict:
        body = {"argv": argv, "timeout_s": timeout_s}
        body.update(extra)
        r = self.server.http("POST", f"/v1/sandboxes/{self.id}/exec", body,
                             timeout=http_timeout or timeout_s + 60)
        assert r.status == 200, f"exec {argv!r} in {self.id}: {r!r}"
        return r.json

    def sh(self, cmd: str, timeout_s: float = 60, **extra) -> dict:
        return self.exec(["/bin/sh", "-c", cmd], timeout_s=timeout_s, **extra)

    def attack(self, *args: str, timeout_s: float = 60, **extra) -> List[dict]:
        res = self.exec([IN_SANDBOX_ATTACK, *args], timeout_s=timeout_s, **extra)
        self.last = res
        return parse_results(res.get("stdout") or "")

    def probe(self) -> dict:
        res = self.exec([IN_SANDBOX_PROBE], timeout_s=30)
        assert res["exit_code"] == 0, f"probe failed in the sandbox: {res!r}"
        return json.loads(res["stdout"])

    def put(self, path: str, data: bytes, mode: str = "0644", timeout: float = 60):
        from urllib.parse import quote
        return self.server.http("PUT", f"/v1/sandboxes/{self.id}/files?path={quote(path)}&mode={mode}",
                                data, timeout=timeout)

    def get(self, path: str, timeout: float = 60):
        from urllib.parse import quote
        return self.server.http("GET", f"/v1/sandboxes/{self.id}/files?path={quote(path)}",
                                timeout=timeout)

    def alive(self) -> bool:
        """The agent still serves commands."""
        try:
            res = self.exec(["/bin/echo", "still-here"], timeout_s=20, http_timeout=40)
        except (AssertionError, OSError):
            return False
        return res.get("exit_code") == 0 and res.get("stdout") == "still-here\n"


def server_rss_kb(server) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def healthy(server, timeout: float = 10) -> bool:
    try:
        r = u.http_request(server, "GET", "/healthz", auth=False, timeout=timeout)
        return r.status == 200 and server.proc.poll() is None
    except OSError:
        return False
