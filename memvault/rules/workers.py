"""The threads a process keeps for the parts of a recall that run beside the caller (the query's embedding, half of
a vector scan).

Two daemon threads: starting a thread for each task cost a quarter of a millisecond, twice a recall; daemon so that a
process ending while a query embeds (an error, an interrupt) does not wait for the model. A task never waits for a
task that has not started: :func:`beside` takes back what no thread has picked up, so recalls from many threads, or
a task that splits itself, only queue, and never deadlock.
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class Workers:
    """A few daemon threads taking tasks from one queue."""

    def __init__(self, size: int = 2) -> None:
        self._tasks: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        for n in range(size):
            threading.Thread(target=self._work, name=f"memvault-query-{n}", daemon=True).start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._tasks.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            future, fn, args = self._tasks.get()
            if not future.set_running_or_notify_cancel():
                continue  # taken back by whoever asked (see beside)
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)


_POOL: Workers | None = None
_POOL_LOCK = threading.Lock()


def pool() -> Workers:
    """This process's workers (started on first use; a forked child starts its own)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = Workers()
        return _POOL


def beside(other: Callable[[], T], mine: Callable[[], U]) -> tuple[T, U]:
    """``other()`` in a worker while this thread runs ``mine()``; ``other`` runs here too, after ``mine``, when no
    worker has started it by then (all of them busy): it never waits in a queue."""
    future = pool().submit(other)
    here = mine()
    if future.cancel():
        return other(), here
    return future.result(), here


def _forget_pool() -> None:
    global _POOL
    _POOL = None  # a forked child has none of its parent's threads


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


__all__ = ["Workers", "pool", "beside"]
