"""What stands between the web view and everyone who is not the person who started it.

- **Who may connect.** The server binds 127.0.0.1 unless ``--host`` is given, and then only with a token (the MCP
  server's rule and code: :func:`memvault.interfaces.mcp.resolve_token`). On loopback a random token is made per
  run, so another user of the same machine cannot act as this one either. The browser presents the token once
  (``/?token=...``, the address ``memvault ui`` prints and ``--open`` opens); it is swapped for an HttpOnly,
  SameSite=Strict cookie and the address without it. Scripts send ``Authorization: Bearer <token>``.
- **DNS rebinding.** The ``Host`` header must name this server (loopback names, or the address it was bound to), so
  a page whose domain was re-pointed at 127.0.0.1 is refused; a request whose ``Origin`` is another site, or that
  a browser marks ``Sec-Fetch-Site: cross-site`` (other than following a link), is refused.
- **CSRF.** Every request that changes anything is a POST carrying a token derived from the session
  (:meth:`Guard.csrf_token`), in the form or the ``X-CSRF-Token`` header.
- **What a page may do.** A Content-Security-Policy with no inline script or style, nothing from another origin,
  no framing; ``nosniff``, no referrer to other sites.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make forms send "Origin: null"
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]
TOKEN_ENV = "MEMVAULT_UI_TOKEN"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def new_token() -> str:
    return secrets.token_urlsafe(24)


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


class Guard:
    """ASGI middleware applying the rules of the module doc in front of ``app``."""

    def __init__(self, app: Any, *, token: str, bind: str, port: int) -> None:
        self.app = app
        self.token = token
        self.port = port
        self.names = host_names(bind)
        self._secret = secrets.token_bytes(32)
        self.cookie_name = f"memvault_ui_{port}"  # cookies ignore ports: two views on one host must not collide
        self._session = hmac.new(self._secret, b"session:" + token.encode(), hashlib.sha256).hexdigest()

    # -- tokens ------------------------------------------------------------------------------------------
    def csrf_token(self) -> str:
        """The CSRF token every changing request must carry (bound to this run's session)."""
        return hmac.new(self._secret, b"csrf:" + self._session.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, value: str | None) -> bool:
        return bool(value) and hmac.compare_digest(str(value), self.csrf_token())

    def _authorized(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        scheme, _, credentials = auth.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), self.token.encode()):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header is no session
            return False
        morsel = cookie.get(self.cookie_name)
        return morsel is not None and hmac.compare_digest(morsel.value.encode(), self._session.encode())

    # -- checks ------------------------------------------------------------------------------------------
    def host_ok(self, headers: dict[str, str]) -> bool:
        name, port = split_host(headers.get("host", ""))
        if not name:
            return False
        if port is not None and port != self.port:
            return False
        return not self.names or name in self.names

    def origin_ok(self, method: str, headers: dict[str, str]) -> bool:
        origin = headers.get("origin")
        if origin is not None and origin != "null":
            if origin.lower() != f"http://{headers.get('host', '').lower()}":
                return False
        elif origin == "null":
            return False
        site = headers.get("sec-fetch-site")
        if site == "cross-site":
            return method == "GET" and headers.get("sec-fetch-mode") == "navigate"
        return True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method = scope.get("method", "GET")
        if not self.host_ok(headers):
            await _refuse(send, 421, "this server does not answer to that Host (a DNS rebinding guard)")
            return
        if not self.origin_ok(method, headers):
            await _refuse(send, 403, "a request from another site is refused")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query and method == "GET":
            if hmac.compare_digest(query["token"].encode(), self.token.encode()):
                rest = urlencode([(k, v) for k, v in parse_qsl(scope["query_string"].decode("latin-1"))
                                  if k != "token"])
                location = scope.get("path", "/") + (f"?{rest}" if rest else "")
                await _send(send, 303, b"", [
                    (b"location", location.encode("latin-1")),
                    (b"set-cookie", f"{self.cookie_name}={self._session}; HttpOnly; SameSite=Strict; Path=/"
                     .encode()),
                    (b"cache-control", b"no-store")])
                return
            await _refuse(send, 401, "wrong token: open the address 'memvault ui' printed")
            return
        if not self._authorized(headers):
            await _refuse(send, 401, "open the address 'memvault ui' printed (it carries the token), or send "
                                     "Authorization: Bearer <token>", html=method == "GET"
                          and "text/html" in headers.get("accept", ""))
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


async def _send(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *headers, *HEADERS]})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Any, status: int, reason: str, *, html: bool = False) -> None:
    if html:
        from markupsafe import escape

        body = (f"<!doctype html><meta charset=utf-8><title>memvault</title><h1>memvault</h1>"
                f"<p>{escape(reason)}</p>").encode()
        await _send(send, status, body, [(b"content-type", b"text/html; charset=utf-8")])
        return
    await _send(send, status, json.dumps({"error": reason}).encode(), [(b"content-type", b"application/json")])

