"""The warm process: one background process per user and install that holds the models and warm vaults, so
short-lived memvault processes neither load a model nor import the vault code.

It serves two kinds of request over the private socket of :mod:`memvault.models.channel`:

- **vectors** for every process that embeds (:mod:`memvault.models.daemon`: the CLI, git hooks, ``watch``, MCP);
- **whole read-only vault calls** for callers that must answer in a few tens of milliseconds (an agent's
  session-start hook): ``memvault.interfaces.warm_client.call(root, name, args)`` names a function registered in
  :data:`CALLS`, and this process runs it on its warm :class:`~memvault.core.vault.Vault` for that root — the
  vault's index open, its vectors in memory, a file watcher marking what changed (:meth:`Vault.follow`), so the
  answer is as fresh as a cold one. Writes never come here: they stay in the caller's process, behind the gate.

Each vault's calls run on one thread of their own, in order (SQLite connections belong to their thread). The
process is started by the first command that needs a model (``python -m memvault.interfaces.warm``), never by a
hook, and exits after ``[embedding] daemon_idle`` without a request.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models import channel, daemon
from ..rules.errors import InvalidValue, describe
from ..rules.validation import validate_source

if TYPE_CHECKING:
    from ..core.vault import Vault

#: Whole calls a warm process serves: name -> "module:function", each ``fn(vault, **args) -> dict``, read-only
#: (writes stay in the caller's process, behind the gate). A function that takes ``source`` receives the caller's
#: (given in ``args``, else the caller's MEMVAULT_SOURCE or user:$USER), used as the CLI would use it.
CALLS: dict[str, str] = {
    "recall": "memvault.interfaces.warm:serve_recall",
    "agent_context": "memvault.interfaces.agents.context:serve",
}


# ------------------------------------------------------------------------------------------------ served calls
def serve_recall(vault: Vault, *, query: str, source: str | None = None, k: int = 10, kinds: list[str] | None = None,
                 budget: int | None = None, mode: str = "hybrid", fmt: str = "json", since: str | None = None,
                 until: str | None = None, min_relevance: float | None = None, record: bool = True) -> dict[str, Any]:
    """``memvault recall QUERY --json`` as a call: the JSON answer, plus ``rendered`` (the text or prompt block)
    when ``fmt`` is not json, and ``printed``: the answer in ``fmt`` exactly as the full CLI prints it (control
    characters escaped), which is all the quick path prints. ``since``/``until`` are RFC 3339 times or ages ("7d"), as on the command line."""
    from ..core.render import render, result_json
    from ..rules.markup import printable
    from ..rules.timeutil import parse_time_or_age

    options: dict[str, Any] = {"mode": mode, "fmt": fmt, "record_access": record, "min_relevance": min_relevance}
    if since:
        options["since"] = parse_time_or_age(since, "since")
    if until:
        options["until"] = parse_time_or_age(until, "until")
    result = vault.recall(query, k=k, kinds=kinds or None, budget=budget, source=source, **options)
    out = result_json(result)
    text = render(result, fmt)  # rendered once: printed is this through printable, as render.printed makes it
    if fmt != "json":
        out["rendered"] = text
    out["printed"] = printable(text)
    return out


def resolve(name: str) -> Callable[..., dict[str, Any]]:
    """The function registered as ``name`` in :data:`CALLS`. Raises InvalidValue for any other name."""
    target = CALLS.get(name)
    if target is None:
        raise InvalidValue("call", f"{name!r} is not a call the warm process serves ({', '.join(sorted(CALLS))})")
    if name == "agent_context":  # imported here, by name: the layer test reads every import (no import_module)
        from .agents.context import serve

        return serve
    return serve_recall


def _takes_source(fn: Callable[..., Any]) -> bool:
    params = inspect.signature(fn).parameters
    return "source" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


# ------------------------------------------------------------------------------------------------ warm vaults
@dataclass
class _Warm:
    vault: Vault
    thread: ThreadPoolExecutor
    config_stamp: tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]  # memvault.toml, local.toml
    used: float = field(default_factory=time.monotonic)


class WarmVaults:
    """One warm :class:`Vault` per root, each with its file watcher and its own thread; models come from the
    process's :class:`~memvault.models.daemon.Models`, so a vault never asks its own process over the socket."""

    def __init__(self, models: daemon.Models, *, idle: float = daemon.DEFAULT_IDLE,
                 open_vault: Callable[[Path], Vault] | None = None) -> None:
        self.models = models
        self.idle = idle
        self._open_vault = open_vault
        self._vaults: dict[Path, _Warm] = {}
        self._lock = threading.Lock()

    def roots(self) -> list[str]:
        return [str(root) for root in list(self._vaults)]  # one copy: a vault opened meanwhile (status, any thread)

    def _open(self, root: Path) -> Vault:
        if self._open_vault is not None:
            return self._open_vault(root)
        from ..core.vault import Vault

        models = self.models
        return Vault(root, embedder_factory=lambda config: models.get(config.model, config.query_prefix,
                                                                    config.embedding.backend))

    def get(self, root: str) -> _Warm:
        """The warm vault at ``root`` (a vault's directory), opened and watched on first use; its settings read
        again when memvault.toml or this host's local.toml changed since."""
        from ..core.vault import Vault

        path = Vault.find_root(Path(root)).resolve()
        from ..rules.config import local_path

        # This host's local.toml too: `reindex --model`, a reranker or an extractor is set there.
        stamp = (_stamp(path / "memvault.toml"), _stamp(local_path(path / "memvault.toml")))
        with self._lock:
            self._expire()
            warm = self._vaults.get(path)
            if warm is None:
                vault = self._open(path)
                thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memvault-warm")
                warm = _Warm(vault, thread, stamp)
                thread.submit(vault.follow).result()
                self._vaults[path] = warm
            elif warm.config_stamp != stamp:
                warm.thread.submit(warm.vault.reload).result()
                warm.config_stamp = stamp
            warm.used = time.monotonic()
            return warm

    def call(self, root: str, name: str, args: dict[str, Any], source: str | None) -> dict[str, Any]:
        """Run the registered call ``name`` on the warm vault at ``root``."""
        fn = resolve(name)
        if not isinstance(args, dict):
            raise InvalidValue("args", "must be a JSON object")
        args = dict(args)
        if "source" in args and args["source"] is not None:
            validate_source(args["source"], "source")
        elif source is not None and _takes_source(fn):
            args["source"] = validate_source(source, "source")
        warm = self.get(root)
        return warm.thread.submit(fn, warm.vault, **args).result()

    def answer(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The socket side of :meth:`call`: a result, or the one-line error the CLI would print."""
        root, name = request.get("root"), request.get("name")
        if not isinstance(root, str) or not isinstance(name, str):
            return {"ok": False, "error": "a call needs a root and a name"}, b""
        try:
            result = self.call(root, name, request.get("args") or {}, request.get("source"))
        except Exception as exc:  # noqa: BLE001 - the same funnel as the CLI: one line and its exit code
            message, code = describe(exc)
            return {"ok": False, "served": True, "error": message, "exit_code": code}, b""
        return {"ok": True, "result": result}, b""

    def _expire(self) -> None:
        now = time.monotonic()
        for root, warm in list(self._vaults.items()):
            if now - warm.used > self.idle:
                del self._vaults[root]
                _close(warm)

    def close(self) -> None:
        with self._lock:
            for warm in self._vaults.values():
                _close(warm)
            self._vaults.clear()


def _close(warm: _Warm) -> None:
    with contextlib.suppress(Exception):
        warm.thread.submit(warm.vault.close).result(timeout=10)
    warm.thread.shutdown(wait=False)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


# ------------------------------------------------------------------------------------------------ the process
def build(idle: float = daemon.DEFAULT_IDLE, *, models: daemon.Models | None = None,
          vaults: WarmVaults | None = None) -> daemon.Server:
    """The warm process's server: vectors for every model, whole calls for every vault."""
    models = models or daemon.Models()
    vaults = vaults or WarmVaults(models, idle=idle)
    handlers: dict[str, daemon.Handler] = {op: models.answer for op in daemon.MODEL_OPS}
    handlers["call"] = vaults.answer
    server = daemon.Server(handlers, idle=idle, describe=lambda: {"models": models.names(), "vaults": vaults.roots()})
    server.vaults = vaults  # type: ignore[attr-defined]
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memvault.interfaces.warm", description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=daemon.DEFAULT_IDLE, help="exit after this many idle seconds")
    parser.add_argument("--expect", metavar="NAME", help="exit at once unless this install's socket has this name "
                        "(the name the starting process computed from its own code)")
    args = parser.parse_args(argv)
    if args.expect is not None and args.expect != channel.socket_name():
        print(f"memvault warm process: its code is not the starting process's (it would listen as "
              f"{channel.socket_name()}, {args.expect} is expected): memvault was upgraded or edited since that "
              "process started; restart it", file=sys.stderr, flush=True)
        return 1
    server = build(args.idle)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: server.stopping.set())
    try:
        return server.serve()
    finally:
        server.vaults.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
