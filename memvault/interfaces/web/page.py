"""What every page of the web view is made of: a request as handlers see it, the page they return (its JSON data
and the template that shows it), the route table they register in, and how addresses are built.

Handlers are plain functions run on the vault's one thread (see :mod:`memvault.interfaces.web.app`); they return
a :class:`Page` whose ``data`` is the JSON served beside the page (``?format=json``) and the template's input.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

if TYPE_CHECKING:
    from ...core.vault import Vault

#: Every page, as (path, name, handler, methods, title in the navigation or None).
ROUTES: list[tuple[str, str, Callable[..., Page], tuple[str, ...], str | None]] = []
#: Path templates by route name, for :func:`url`.
PATHS: dict[str, str] = {}


@dataclass
class Req:
    """A request as a handler sees it: query and form values (first value of each; ``all`` for lists)."""

    method: str
    path: str
    query: Mapping[str, str]
    params: Mapping[str, str]
    form: Mapping[str, str]
    lists: Mapping[str, list[str]] = field(default_factory=dict)

    def arg(self, name: str, default: str | None = None) -> str | None:
        value = self.form.get(name) if self.method == "POST" and name in self.form else self.query.get(name)
        if value is None or not str(value).strip():
            return default
        return str(value).strip()

    def int_arg(self, name: str, default: int, lo: int = 0, hi: int = 10**9) -> int:
        value = self.arg(name)
        try:
            return max(lo, min(hi, int(value))) if value is not None else default
        except ValueError:
            return default

    def all(self, name: str) -> list[str]:
        return [v for v in self.lists.get(name, []) if v.strip()]


@dataclass
class Page:
    """A handler's answer: ``data`` (JSON-able: what ``?format=json`` returns) shown by ``template``."""

    template: str
    data: dict[str, Any]
    status: int = 200
    #: Objects only the template needs (not part of the JSON).
    extra: dict[str, Any] = field(default_factory=dict)
    #: Answer with a redirect (after a POST) instead.
    redirect: str | None = None


@dataclass
class Web:
    """What handlers get: the vault, the source acting (``ui --source``, else as for the CLI: ``MEMVAULT_SOURCE``,
    else the local user; its ``[scopes]`` apply to every page), and state of the view."""

    vault: Vault
    source: str
    #: Files the index has not caught up with, from the last background check (see app.Refresher).
    lag: dict[str, int] = field(default_factory=dict)
    lag_checked: str | None = None
    #: Answers that hold until the index changes: (name, ...) -> (index version, value).
    cache: dict[tuple[str, ...], tuple[Any, Any]] = field(default_factory=dict)

    def inbox_count(self) -> int:
        """Proposals waiting that this view's source may see (all of them for a source no scope names)."""
        from ...rules.errors import MemvaultError

        try:
            if self.vault.reader(self.source).scope is None:
                return len(self.vault.facts.store.files(inbox=True))
            return len(self.vault.facts.inbox(reader=self.source))
        except MemvaultError:
            return 0

    def readable_facts(self, matches: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """The matches (``{"key": ...}``, duplicates and contradictions) whose fact this view's source may read,
        and how many others were left out (named by no key: a scoped source learns no key outside its scope)."""
        from ...core.access import within

        return within(self.vault.config.scopes, self.source, matches, self.vault.root)

    def cached(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
        """``make()``, reused while the index has not changed (a warm process does not redo what did not change)."""
        version = self.vault.browse.version()
        hit = self.cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        if len(self.cache) > 2000:
            self.cache.clear()
        value = make()
        self.cache[key] = (version, value)
        return value


def route(path: str, name: str, *, methods: tuple[str, ...] = ("GET",), nav: str | None = None
          ) -> Callable[[Callable[..., Page]], Callable[..., Page]]:
    """Register a handler ``fn(web, req) -> Page`` at ``path`` (Starlette path syntax)."""

    def register(fn: Callable[..., Page]) -> Callable[..., Page]:
        ROUTES.append((path, name, fn, methods, nav))
        PATHS.setdefault(name, path)
        return fn

    return register


def url(name: str, /, **params: Any) -> str:
    """The address of route ``name``: path parameters filled in (each segment quoted), the rest as a query."""
    path = PATHS[name]
    query = {}
    for key, value in params.items():
        token = "{" + key + "}"
        token_path = "{" + key + ":path}"
        if token_path in path:
            path = path.replace(token_path, quote(str(value), safe="/"))
        elif token in path:
            path = path.replace(token, quote(str(value), safe=""))
        elif value is not None and value != "" and value is not False:
            query[key] = value
    return path + ("?" + urlencode(query, doseq=True) if query else "")


def with_query(req: Req, **changes: Any) -> str:
    """The current address with some query values changed (None removes one)."""
    query = {k: v for k, v in req.query.items() if k not in changes and k not in ("format", "fragment")}
    query.update({k: v for k, v in changes.items() if v is not None and v != ""})
    return req.path + ("?" + urlencode(query) if query else "")
