"""One guard for every network face memvault opens: the MCP server's streamable HTTP and the web view.

The rule, the same on both:

- **A token every run, even on loopback.** Loopback is not a person: every user of the machine can connect to
  127.0.0.1. A token is given (``--token-file`` or the face's environment variable) or made for this run and
  printed once, on stderr, to whoever started the server. Off loopback a token must be given: a token printed
  to a terminal is no way to hand a secret to another machine.
- **Every request proves it.** ``Authorization: Bearer <token>`` (what MCP's streamable HTTP clients and scripts
  send) is checked on every request, in constant time. The web view adds a browser session on top of this
  (:mod:`memvault.interfaces.web.security`); the MCP face takes nothing else.
- **DNS rebinding.** The ``Host`` header must name this server (loopback names or the bound address, and this
  port), so a page whose domain was re-pointed at 127.0.0.1 is refused before the token is even looked at; a
  request whose ``Origin`` is another site, or that a browser marks ``Sec-Fetch-Site: cross-site`` (other than
  following a link), is refused.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import Iterable
from typing import Any

from ..rules.errors import MemvaultError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def new_token() -> str:
    """A token for one run of one server (192 bits)."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost. Anything else (0.0.0.0 included) reaches other machines."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(host: str, token: str | None, *, env: str, what: str) -> str | None:
    """The token given: ``token``, else the environment variable ``env``; None when neither is set.

    Off loopback one must be given (MemvaultError otherwise, before anything binds); on loopback the caller makes
    one for the run (:func:`new_token`) and prints it.
    """
    token = token or os.environ.get(env) or None
    if token is not None and not token.strip():
        token = None
    if token is None and not is_loopback(host):
        raise MemvaultError(
            f"refusing to serve {what} on {host}, which is not a loopback address, without a bearer token: "
            f"pass --token-file or set {env} (or bind 127.0.0.1)"
        )
    return token


def host_names(bind: str) -> set[str]:
    """The host names a request may address this server by (lower case, IPv6 without brackets); empty = any."""
    if bind in WILDCARDS:
        return set()  # bound to every address: the token is what keeps a rebinding page out
    return {bind.lower().strip("[]"), *LOOPBACK_NAMES}


def split_host(value: str) -> tuple[str, int | None]:
    """``Host`` header -> (name, port)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return name, int(port) if port.isdigit() else None


def headers_of(scope: dict[str, Any]) -> dict[str, str]:
    """An ASGI scope's headers by lower-case name (the last value of a repeated header)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class Rules:
    """The checks of the module doc for one server: its token, the address it is bound to, its port."""

    def __init__(self, *, token: str, bind: str, port: int) -> None:
        if not token:
            raise ValueError("a guard needs a token")  # a programming error: every face makes one
        self.token = token
        self.port = port
        self.names = host_names(bind)

    def bearer_ok(self, headers: dict[str, str]) -> bool:
        scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(credentials.strip())

    def token_ok(self, value: str) -> bool:
        return hmac.compare_digest(value.encode("utf-8", "surrogateescape"), self.token.encode())

    def host_ok(self, headers: dict[str, str]) -> bool:
        name, port = split_host(headers.get("host", ""))
        if not name:
            return False
        if port is not None and port != self.port:
            return False
        return not self.names or name in self.names

    def origin_ok(self, method: str, headers: dict[str, str]) -> bool:
        origin = headers.get("origin")
        if origin is not None and (origin == "null" or origin.lower() != f"http://{headers.get('host', '').lower()}"):
            return False
        if headers.get("sec-fetch-site") == "cross-site":
            return method == "GET" and headers.get("sec-fetch-mode") == "navigate"
        return True


class BearerGuard:
    """ASGI middleware for a face that programs call (MCP): Host, Origin and the bearer token on every request."""

    def __init__(self, app: Any, *, token: str, bind: str, port: int, hint: str) -> None:
        self.app = app
        self.rules = Rules(token=token, bind=bind, port=port)
        self.hint = hint

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = headers_of(scope)
        if not self.rules.host_ok(headers):
            await refuse(send, 421, "this server does not answer to that Host (a DNS rebinding guard)")
            return
        if not self.rules.origin_ok(scope.get("method", "GET"), headers):
            await refuse(send, 403, "a request from another site is refused")
            return
        if not self.rules.bearer_ok(headers):
            await refuse(send, 401, f"unauthorized: send Authorization: Bearer <token> ({self.hint})",
                         headers=[(b"www-authenticate", b'Bearer realm="memvault"')])
            return
        await self.app(scope, receive, send)


async def respond(send: Any, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


async def refuse(send: Any, status: int, reason: str, *, html: bool = False,
                 headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Answer ``status`` with ``reason``: JSON ``{"error": ...}``, or a one-line page for a browser. The connection
    closes after it: a client that proved nothing keeps no connection to send more (see
    :mod:`memvault.interfaces.connections`)."""
    headers = [*headers, (b"connection", b"close")]
    if html:
        from markupsafe import escape

        body = (f"<!doctype html><meta charset=utf-8><title>memvault</title><h1>memvault</h1>"
                f"<p>{escape(reason)}</p>").encode()
        await respond(send, status, body, [(b"content-type", b"text/html; charset=utf-8"), *headers])
        return
    await respond(send, status, json.dumps({"error": reason}).encode(),
                  [(b"content-type", b"application/json"), *headers])
