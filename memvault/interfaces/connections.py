"""How long a connection to a memvault server may take to say what it wants, and how many may be saying it at once.

uvicorn times a connection out only between two requests (its keep-alive timeout): one that opens and then sends its
request head a byte at a time, or never finishes it (slowloris), is held for ever. No token is needed for that —
the token is read from the head — so anyone who can reach the port could hold every file descriptor of the process
(which its git and SQLite need as well) and the view stops answering its owner. Here:

- a connection must finish its first request head within :data:`HEAD_SECONDS` of opening, or it is closed;
- at most :data:`MAX_WAITING` connections may be waiting for their head at once: a new one beyond that closes the
  one that has waited longest (so the owner's browser, which sends its head at once, still gets in while someone
  floods the port with half-open connections);
- a refused request closes its connection (``Connection: close``, see :func:`memvault.interfaces.guard.refuse`),
  so only a client that proved itself keeps one open past its first answer to send more.

Only the asyncio protocol methods of uvicorn's h11 implementation (the class its ``http="h11"`` setting names, taken
from where its config says) are extended, and uvicorn's ``Config`` takes a protocol class for ``http``; requests
themselves are left to it. A uvicorn that names no such class serves without the limits, and says so.
"""
from __future__ import annotations

import asyncio
import sys
from collections import OrderedDict
from typing import Any

#: Seconds a new connection has to send its whole first request head.
HEAD_SECONDS = 10.0
#: Connections that may be waiting for their first request head at once.
MAX_WAITING = 64
#: The ends of a request head (h11 also takes bare newlines).
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


def bounded_protocol(head_seconds: float | None = None,
                     max_waiting: int | None = None) -> type[asyncio.Protocol] | None:
    """uvicorn's h11 protocol with the two limits of the module doc (one server's count of waiting connections), or
    None when this uvicorn names no such class where its ``http="h11"`` setting takes it from."""
    try:
        from uvicorn.config import HTTP_PROTOCOLS
        from uvicorn.importer import import_from_string

        H11Protocol = import_from_string(HTTP_PROTOCOLS["h11"])
    except (ImportError, KeyError, AttributeError, ValueError):
        return None
    if not (isinstance(H11Protocol, type) and issubclass(H11Protocol, asyncio.Protocol)):
        return None

    seconds = HEAD_SECONDS if head_seconds is None else head_seconds
    most = MAX_WAITING if max_waiting is None else max_waiting
    waiting: OrderedDict[int, Any] = OrderedDict()  # id -> protocol, the longest waiting first

    class Bounded(H11Protocol):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._memvault_transport, self._memvault_tail = transport, b""
            self._memvault_timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
                seconds, self._memvault_drop)
            waiting[id(self)] = self
            while len(waiting) > most:
                waiting.popitem(last=False)[1]._memvault_drop()

        def data_received(self, data: bytes) -> None:
            if self._memvault_timer is not None:
                seen = self._memvault_tail + data
                if any(end in seen for end in _HEAD_ENDS):
                    self._memvault_forget()
                else:
                    self._memvault_tail = seen[-3:]
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self._memvault_forget()
            super().connection_lost(exc)

        def _memvault_forget(self) -> None:
            if self._memvault_timer is not None:
                self._memvault_timer.cancel()
                self._memvault_timer = None
            waiting.pop(id(self), None)

        def _memvault_drop(self) -> None:
            self._memvault_forget()
            self._memvault_transport.close()

    return Bounded


def server_config(app: Any, **options: Any) -> Any:
    """A ``uvicorn.Config`` for ``app`` with the limits of the module doc (``options`` go to it as they are)."""
    import uvicorn

    settings: dict[str, Any] = {"log_level": "warning", "lifespan": "on", "access_log": False}
    protocol = bounded_protocol()
    if protocol is None:  # a uvicorn that moved its h11 protocol: serve, and say the limits are off
        print("memvault: this uvicorn has no h11 protocol class where its config names it; connections are served "
              "without memvault's limit on slow request heads", file=sys.stderr, flush=True)
    return uvicorn.Config(app, http=protocol or "h11", **{**settings, **options})
