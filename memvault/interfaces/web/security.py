"""What stands between the web view and everyone who is not the person who started it.

- **Who may connect**: the rule every network face shares (:mod:`memvault.interfaces.guard`): a token per run even on
  loopback (given off loopback), ``Host`` and ``Origin`` checked against DNS rebinding and other sites.
- **A session no other local port can replay.** Browsers send a cookie to every port of a host (cookies ignore
  ports), so a cookie alone would reach a server any local user starts on 127.0.0.1 the moment the browser visits
  it; with it that user could read every page — CSRF token included — and post. So the view lives under a random
  path made for this run (:attr:`Guard.root`, 128 bits, e.g. ``/Xk3…/facts``) and the session cookie is scoped
  to that path (``Path=<root>``): the browser sends it only for addresses under the root, which no other port
  knows — the root is never sent off this origin (``Referrer-Policy: same-origin``, no link leaves the view).
  The server asks for both: a request with the right cookie but not under the root is refused, and so is one
  under the root without the cookie. Someone who has the cookie value (from a request to their own port or any
  other way) still lacks the root; someone who saw the address bar still lacks the cookie (HttpOnly).
- **The token swap.** The address ``memvault ui`` prints carries the token once (``/?token=...``); it is swapped
  for the cookie and a redirect to the same page under the root. That redirect only ever names a path on this
  server: a path that a browser could read as another host (``//evil.example/``, ``/\\evil``, control characters)
  becomes ``<root>/``. Scripts skip all this and send ``Authorization: Bearer <token>``.
- **CSRF.** Every request that changes anything is a POST carrying a token derived from the session
  (:meth:`Guard.csrf_token`), in the form or the ``X-CSRF-Token`` header; it is in the pages, never in a cookie.
- **What a page may do.** A Content-Security-Policy with no inline script or style, nothing from another origin,
  no framing; ``nosniff``, no referrer to other sites.
- **What a page leaves behind.** Pages hold the vault's text and the run's CSRF token: every answer is
  ``Cache-Control: no-store`` (unless it says otherwise), so none of it stays in the browser's disk cache after the
  view stops.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from ..guard import Rules, headers_of, refuse, respond

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
#: What an answer that names no caching of its own gets: kept nowhere (see "What a page leaves behind").
NO_STORE = (b"cache-control", b"no-store")
TOKEN_ENV = "MEMVAULT_UI_TOKEN"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
#: A path segment the redirect after the token swap may keep: printable ASCII without ``\`` (which some browsers
#: read as ``/``), ``?`` or ``#``.
_SEGMENT = re.compile(r"[\x21-\x7e]+")


def safe_path(path: str) -> str:
    """``path`` if it can only name a page of this server, else ``/``: one leading ``/``, then non-empty segments of
    printable ASCII without backslashes and none of them ``.`` or ``..`` (so nothing can become ``//host``)."""
    if not path.startswith("/") or path == "/":
        return "/"
    segments = path[1:].split("/")
    if segments[-1] == "":
        segments = segments[:-1]  # one trailing slash is a path's own
    for segment in segments:
        if not _SEGMENT.fullmatch(segment) or "\\" in segment or "?" in segment or "#" in segment \
                or segment in (".", ".."):
            return "/"
    return path


class Guard:
    """ASGI middleware applying the rules of the module doc in front of ``app`` (which sees paths without the root)."""

    def __init__(self, app: Any, *, token: str, bind: str, port: int) -> None:
        self.app = app
        self.rules = Rules(token=token, bind=bind, port=port)
        self.token = token
        self.port = port
        #: The random path this run's pages live under (see the module doc); every address the view makes has it.
        self.root = "/" + secrets.token_urlsafe(16)
        self._secret = secrets.token_bytes(32)
        self.cookie_name = f"memvault_ui_{port}"  # cookies ignore ports: two views on one host must not collide
        self._session = hmac.new(self._secret, b"session:" + self.root.encode(), hashlib.sha256).hexdigest()

    # -- tokens ------------------------------------------------------------------------------------------
    def csrf_token(self) -> str:
        """The CSRF token every changing request must carry (bound to this run's session)."""
        return hmac.new(self._secret, b"csrf:" + self._session.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, value: str | None) -> bool:
        return bool(value) and hmac.compare_digest(str(value).encode("utf-8", "surrogateescape"),
                                                   self.csrf_token().encode())

    def session_ok(self, headers: dict[str, str]) -> bool:
        cookie: SimpleCookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed cookie header is no session
            return False
        morsel = cookie.get(self.cookie_name)
        return morsel is not None and hmac.compare_digest(morsel.value.encode("utf-8", "surrogateescape"),
                                                          self._session.encode())

    def inner(self, path: str) -> str | None:
        """``path`` without the root, or None when it is not under the root."""
        if path == self.root or path.startswith(self.root + "/"):
            return path[len(self.root):] or "/"
        return None

    # -- requests ----------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        headers = headers_of(scope)
        method = scope.get("method", "GET")
        if not self.rules.host_ok(headers):
            await _refuse(send, 421, "this server does not answer to that Host (a DNS rebinding guard)")
            return
        if not self.rules.origin_ok(method, headers):
            await _refuse(send, 403, "a request from another site is refused")
            return
        path = scope.get("path", "/")
        inner = self.inner(path)
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        if method == "GET" and any(k == "token" for k, _v in query):
            await self._swap(send, inner if inner is not None else path, query)
            return
        if not (self.rules.bearer_ok(headers) or (inner is not None and self.session_ok(headers))):
            await _refuse(send, 401, "open the address 'memvault ui' printed (it carries the token), or send "
                                     "Authorization: Bearer <token>", html=method == "GET"
                          and "text/html" in headers.get("accept", ""))
            return
        if inner is not None:  # the application routes without the root
            scope = {**scope, "path": inner, "raw_path": quote(inner, safe="/:@!$&'()*+,;=~").encode("latin-1")}

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                sent = list(message.get("headers", []))
                if not any(name.lower() == b"cache-control" for name, _value in sent):
                    sent.append(NO_STORE)
                message["headers"] = sent + HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)

    async def _swap(self, send: Any, path: str, query: list[tuple[str, str]]) -> None:
        """The token from the printed address -> the session cookie, and the same page under the root."""
        if not self.rules.token_ok(dict(query)["token"]):
            await _refuse(send, 401, "wrong token: open the address 'memvault ui' printed")
            return
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        location = self.root + quote(safe_path(path), safe="/:@!$&'()*+,;=~") + (f"?{rest}" if rest else "")
        await respond(send, 303, b"", [
            (b"location", location.encode("ascii")),
            (b"set-cookie", f"{self.cookie_name}={self._session}; HttpOnly; SameSite=Strict; Path={self.root}"
             .encode()),
            (b"cache-control", b"no-store"), *HEADERS])


async def _refuse(send: Any, status: int, reason: str, *, html: bool = False) -> None:
    await refuse(send, status, reason, html=html, headers=HEADERS)
