"""The web view as an ASGI application (Starlette): routes, templates, JSON beside every page, live refresh.

Each page handler (the modules ``overview``, ``facts``, ``timeline``, ``recall`` of this package) runs on the vault's
one thread — its SQLite connections belong to it, and writers are serialised anyway — and returns a
:class:`~memvault.interfaces.web.page.Page`. Here it becomes HTML (Jinja2, autoescaped: every stored string is
text), its JSON (``?format=json`` or ``Accept: application/json``), one block of its template (``?fragment=NAME``,
what the live parts of a page fetch), or a redirect. Errors become one line through
:func:`memvault.rules.errors.describe`, the CLI's mapping, with a status that says what kind.

Live: a background task brings the index in step with the files every couple of seconds (the same cheap
directory check recall makes) and counts what it lags behind; pages poll ``/live`` for the index's version and
re-fetch their live parts when it moves.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ...rules.errors import (FactNotFound, FactParseError, InvalidKey, InvalidValue, MemvaultError, ProcedureNotFound,
                             SecretRefused, UntrustedSource, describe)
from ...rules.timeutil import format_time, now
from ...rules.validation import vault_paths
# Importing a page module registers its pages (a package-relative ``from . import`` would name the package).
from .facts import patch_lines, show_direction
from .overview import overview  # noqa: F401
from .recall import recall  # noqa: F401
from .scopes import scopes  # noqa: F401
from .timeline import timeline  # noqa: F401
from .page import PATHS, ROUTES, Page, Req, Web, url, with_query
from .security import CSRF_FIELD, CSRF_HEADER, Guard

if TYPE_CHECKING:
    from ...core.vault import Vault

#: The blocks of a page served alone (``?fragment=NAME``): the parts a page swaps in when the vault changes.
FRAGMENTS = frozenset({"live", "entries", "episodes"})

T = TypeVar("T")
HERE = Path(__file__).resolve().parent
#: Seconds between two background checks of the files (new episodes, hand edits) and of the lag.
REFRESH_SECONDS = 2.0
LAG_SECONDS = 30.0
#: The order of the navigation (pages register themselves in import order).
NAV_ORDER = ["overview", "facts", "inbox", "timeline", "sessions", "procedures", "recall", "recalls", "scopes"]
#: Largest form body accepted (a fact file is at most 64 KiB; a few fields around it).
MAX_BODY = 1 << 20
#: What a refused request body is told, by status.
_BODY_REFUSED = {400: "not a form the view sends", 413: "request too large",
                 415: "a form is sent as application/x-www-form-urlencoded"}


async def _body(request: Any) -> list[tuple[str, str]] | int:
    """The fields of a POST's form, read as they come and no further than :data:`MAX_BODY` (the Content-Length
    header alone was checked, so a chunked body was read whole before it), or the status that refuses it. The
    view's forms are URL-encoded; nothing else is read."""
    from urllib.parse import parse_qsl

    try:
        declared = int(request.headers.get("content-length") or 0)
    except ValueError:
        return 400
    if declared > MAX_BODY:
        return 413
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return 413
        chunks.append(chunk)
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if size and kind != "application/x-www-form-urlencoded":
        return 415
    try:
        return parse_qsl(b"".join(chunks).decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=1000)
    except ValueError:
        return 400


class VaultThread:
    """Runs every call on the vault on one thread, in order."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memvault-web")

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._executor.submit(fn, *args))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


def status_of(exc: BaseException) -> int:
    if isinstance(exc, (FactNotFound, ProcedureNotFound)):
        return 404
    if isinstance(exc, UntrustedSource):
        return 403
    if isinstance(exc, (FactParseError, SecretRefused, InvalidKey, InvalidValue)):
        return 422
    return 400 if isinstance(exc, MemvaultError) else 500


class Verbatim(str):
    """A value a form sends back (a textarea's text, a field's value): put in the page as it is, direction
    controls included, so saving never changes it (the ``verbatim`` filter)."""


def shown(value: Any) -> Any:
    """What every ``{{ value }}`` of a template writes (before escaping): text with each bidirectional control
    written as its escape (``\\u202e``, as the CLI prints it), so no stored text reorders what a person reads."""
    if isinstance(value, str) and not isinstance(value, Verbatim) and not hasattr(value, "__html__"):
        return show_direction(value)
    return value


def templates(root: str = "") -> Any:
    """The page templates; every address they make starts with ``root`` (the run's random path, see security)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, finalize=shown)
    env.filters["verbatim"] = lambda value: Verbatim("" if value is None else value)
    pages = [(name, title) for _p, name, _f, _m, title in ROUTES if title]
    env.globals.update(url=lambda name, /, **params: root + url(name, **params), root=root,
                       nav=sorted(pages, key=lambda page: NAV_ORDER.index(page[0])
                                  if page[0] in NAV_ORDER else len(NAV_ORDER)))
    env.filters["short"] = lambda value, n=12: (str(value)[:n] if value else "")
    env.filters["when"] = lambda value: (str(value).replace("T", " ").replace("Z", "") if value else "")
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    env.filters["patch"] = patch_lines
    return env


class WebApp:
    """The application around one vault; :attr:`asgi` is what a server runs (behind :class:`Guard`)."""

    def __init__(self, vault: Vault, *, token: str, bind: str = "127.0.0.1", port: int = 8787,
                 refresh: bool = True) -> None:
        from starlette.applications import Starlette
        from starlette.routing import Mount, Route
        from starlette.staticfiles import StaticFiles

        # The view reads and writes as one source (``ui --source``, else MEMVAULT_SOURCE, else the local user): every
        # read of the facade is then within its scope, every write and review goes through the gate as it.
        vault.act_as(vault.reader().source)
        self.web = Web(vault, vault.reader().source)
        self.on_vault = VaultThread()
        self.refresh = refresh
        #: Set once git's commit-graph has been brought up to date (or could not be).
        self.history_ready = threading.Event()
        self._graph_thread: threading.Thread | None = None
        self._graph_head: str | None = None
        routes: list[Any] = [Route(path, self._endpoint(fn), methods=list(methods), name=name)
                             for path, name, fn, methods, _nav in ROUTES]
        routes.append(Route("/live", self.live, methods=["GET"], name="live"))
        routes.append(Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"))
        self.starlette = Starlette(routes=routes, lifespan=self._lifespan)
        self.guard = Guard(self.starlette, token=token, bind=bind, port=port)
        self.asgi = self.guard
        self.env = templates(self.guard.root)

    # -- lifespan: the index checked in the background ---------------------------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Any) -> Any:
        await self.on_vault(self._prepare)
        task = asyncio.create_task(self._refresher()) if self.refresh else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            with contextlib.suppress(Exception):
                await self.on_vault(self.web.vault.close)  # the file watcher stops with the view
            self.on_vault.shutdown()

    def _prepare(self) -> None:
        """An index to list from (keyword rows at once; vectors come with recall or reindex), and a file watcher on
        the vault for as long as the view runs: its refreshes and recalls check what changed, not every directory."""
        vault = self.web.vault
        vault.follow()
        with contextlib.suppress(MemvaultError):
            if not vault.index.exists():
                vault.index.sync(splitter=vault.engine.warm())
            self._check_lag()
        self._maintain_history()

    def _maintain_history(self) -> None:
        """Keep git's commit-graph current on a thread of its own (the first run at 10k commits takes seconds;
        pages do not wait for it, a file's history is only slower until it is done)."""
        git = self.web.vault.git
        if git is None or (self._graph_thread is not None and self._graph_thread.is_alive()):
            return

        def run() -> None:
            from ...core.history import write_commit_graph

            try:
                head = git.run("rev-parse", "--verify", "--quiet", "HEAD")
                if head != self._graph_head:
                    write_commit_graph(git)
                    self._graph_head = head
            except MemvaultError:
                pass  # an old git, a read-only repository: history works, only slower
            finally:
                self.history_ready.set()

        self._graph_thread = threading.Thread(target=run, name="memvault-web-history", daemon=True)
        self._graph_thread.start()

    async def _refresher(self) -> None:
        last_lag = time.monotonic()
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                await self.on_vault(self._refresh_once)
                if time.monotonic() - last_lag > LAG_SECONDS:
                    last_lag = time.monotonic()
                    await self.on_vault(self._check_lag)
                    self._maintain_history()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bad moment of the disk must not stop the live view
                continue

    def _refresh_once(self) -> None:
        index = self.web.vault.browse.index  # what the listings read (a team host's: the team index)
        if index.exists():
            index.refresh(self.web.vault.config.recall.rescan_interval)

    def _check_lag(self) -> None:
        self.web.lag = self.web.vault.browse.lag()
        self.web.lag_checked = format_time(now())

    # -- requests ----------------------------------------------------------------------------------------
    def _endpoint(self, fn: Callable[..., Page]) -> Callable[..., Any]:
        async def endpoint(request: Any) -> Any:
            started = time.perf_counter()
            response = await handle(request)
            # What the server spent on the page (bench/bench_web.py reads it; so can a person, in the devtools).
            response.headers["server-timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
            return response

        async def handle(request: Any) -> Any:
            from starlette.responses import JSONResponse, PlainTextResponse

            form: dict[str, str] = {}
            lists: dict[str, list[str]] = {}
            if request.method == "POST":
                body = await _body(request)
                if isinstance(body, int):
                    return PlainTextResponse(_BODY_REFUSED[body], status_code=body)
                for key, value in body:
                    form.setdefault(key, value)
                    lists.setdefault(key, []).append(value)
                if not self.guard.csrf_ok(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)):
                    return JSONResponse({"error": "missing or wrong CSRF token: reload the page"}, status_code=403)
            for key, value in request.query_params.multi_items():
                lists.setdefault(key, []).append(value)
            req = Req(request.method, request.url.path, dict(request.query_params), dict(request.path_params), form,
                      lists)
            wants_json = (req.query.get("format") == "json"
                          or "application/json" in request.headers.get("accept", "").split(",")[0])
            try:
                page = await self.on_vault(fn, self.web, req)
            except Exception as exc:  # noqa: BLE001 - the one funnel: one line, a status
                # files by their vault path: a browser may be on another machine (--host), the host's home is no
                # business of the page
                message = vault_paths(describe(exc)[0], self.web.vault.root)
                if wants_json:
                    return JSONResponse({"error": message}, status_code=status_of(exc))
                page = Page("error.html", {"error": message}, status=status_of(exc))
            return await self.respond(page, req, wants_json)

        return endpoint

    async def respond(self, page: Page, req: Req, wants_json: bool) -> Any:
        from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse

        if page.redirect is not None:
            return RedirectResponse(self.guard.root + page.redirect, status_code=303)
        if wants_json:
            return JSONResponse(page.data, status_code=page.status)
        context = await self.on_vault(self._context, req)
        template = self.env.get_template(page.template)
        values = {**context, **page.extra, "data": page.data}
        fragment = req.query.get("fragment")
        if fragment:
            if fragment not in FRAGMENTS or fragment not in template.blocks:  # "main", "title": not parts to swap
                return JSONResponse({"error": f"no fragment {fragment!r}"}, status_code=404)
            html = "".join(template.blocks[fragment](template.new_context(values)))
        else:
            html = template.render(values)
        return HTMLResponse(html, status_code=page.status)

    def _context(self, req: Req) -> dict[str, Any]:
        vault = self.web.vault
        return {"req": req, "user": self.web.source, "user_trusted": vault.facts.is_trusted(self.web.source),
                "user_scoped": vault.reader(self.web.source).scope is not None, "inbox_count": self.web.inbox_count(),
                "csrf": self.guard.csrf_token(), "csrf_json": json.dumps({"X-CSRF-Token": self.guard.csrf_token()}),
                "vault_root": str(vault.root), "here": self.guard.root + with_query(req),
                "json_url": self.guard.root + with_query(req, format="json"), "paths": PATHS}

    async def live(self, request: Any) -> Any:
        """The index's version (changes when anything in it does) and the inbox size: what pages poll."""
        from starlette.responses import JSONResponse

        def probe() -> dict[str, Any]:
            vault = self.web.vault
            return {"version": "-".join(map(str, vault.browse.version())), "inbox": self.web.inbox_count()}

        try:
            return JSONResponse(await self.on_vault(probe), headers={"cache-control": "no-store"})
        except MemvaultError as exc:
            return JSONResponse({"error": describe(exc)[0]}, status_code=500)


def create_app(vault: Vault, *, token: str, bind: str = "127.0.0.1", port: int = 8787,
               refresh: bool = True) -> WebApp:
    """The web view of ``vault`` (see :class:`WebApp`); ``token`` is what a browser or script must present."""
    return WebApp(vault, token=token, bind=bind, port=port, refresh=refresh)
