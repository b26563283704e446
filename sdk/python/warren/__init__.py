"""Warren Python SDK: sandboxes for AI agents. Standard library only.

    import warren
    client = warren.Client()
    with client.sandbox(image="py:3.11") as sb:
        print(sb.run("echo hi").stdout)
"""

from .errors import (Conflict, Forbidden, InternalError, InvalidRequest, NotFound,
                     QuotaExceeded, Unauthorized, Unavailable, WarrenError)
from .client import (CallResult, Client, ExecResult, Layer, Lease, Record, Sandbox,
                     StreamEvent, default_token, default_url)
from .aio import AsyncClient, AsyncLease, AsyncSandbox
from .pty import Pty

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncLease", "AsyncSandbox", "CallResult", "Client", "Conflict",
    "ExecResult", "Forbidden", "InternalError", "InvalidRequest", "Layer", "Lease",
    "NotFound", "Pty", "QuotaExceeded", "Record", "Sandbox", "StreamEvent", "Unauthorized",
    "Unavailable", "WarrenError", "default_token", "default_url",
]
