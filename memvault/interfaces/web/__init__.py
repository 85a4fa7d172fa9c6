"""``memvault ui``: a local web view of one vault — overview, facts with their git history, inbox review, timeline
and agent sessions, procedures and their runs, the recall playground, and the log of what agents were told.

An interface like the CLI and the MCP server: every read goes to the facade (listings are SQL over the index,
:mod:`memvault.core.browse`), every change through the write gate as the local user (``user:<login>``, as the CLI
acts), so the trust table applies. Pages are server-rendered (Jinja2, autoescaped) with JSON beside each one and a
little htmx, vendored in ``static/`` (no CDN, no build step); charts are SVG computed on the server
(:mod:`.charts`). Security: :mod:`.security`.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ...rules.errors import MemvaultError

if TYPE_CHECKING:
    from ...core.vault import Vault
    from .app import WebApp

DEFAULT_PORT = 8787


def build(vault: Vault, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str | None = None,
          refresh: bool = True) -> tuple[WebApp, str]:
    """The application and the token it requires. Off loopback a token must be given (``--token-file`` or
    ``MEMVAULT_UI_TOKEN``); on loopback one is made for this run when none is."""
    from ..guard import new_token, resolve_token
    from .app import create_app
    from .security import TOKEN_ENV

    if not 0 <= port < 65536:
        raise MemvaultError(f"--port {port}: not a port number")
    token = resolve_token(host, token, env=TOKEN_ENV, what="the web view") or new_token()
    return create_app(vault, token=token, bind=host, port=port, refresh=refresh), token


def address(host: str, port: int, token: str | None = None) -> str:
    """The address a browser opens (with the token, which the server swaps for a cookie at once)."""
    shown = f"[{host}]" if ":" in host else ("127.0.0.1" if host in ("", "0.0.0.0") else host)
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(vault: Vault, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str | None = None,
          open_browser: bool = False) -> None:
    """Serve the web view until stopped (Ctrl-C or SIGTERM). Prints the address to open, token included."""
    import socket

    import uvicorn

    app, token = build(vault, host=host, port=port, token=token)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections wait in the backlog while the server starts: the address printed works
    except OSError as exc:
        sock.close()
        raise MemvaultError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    port = sock.getsockname()[1]
    if port != app.guard.port:  # --port 0: the system chose one
        app, token = build(vault, host=host, port=port, token=token)
    url = address(host, port, token)
    print(f"memvault ui: serving {vault.root} at {url}\n(acting as {app.web.source}; Ctrl-C stops)",
          file=sys.stderr, flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    from ..connections import server_config

    uvicorn.Server(server_config(app.asgi)).run(sockets=[sock])
