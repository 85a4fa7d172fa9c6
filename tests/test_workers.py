"""The process's worker threads (memvault.rules.workers): a task split in two runs its halves side by side, and
never waits in a queue behind busy workers."""
from __future__ import annotations

import threading

import pytest

from memvault.rules import workers


def test_the_other_half_runs_in_a_worker_while_this_thread_runs_its_own():
    started, seen = threading.Event(), {}

    def other():
        seen["other"] = threading.current_thread().name
        started.set()
        return 1

    def mine():
        seen["mine"] = threading.current_thread().name
        return started.wait(5)  # the worker picks it up meanwhile

    assert workers.beside(other, mine) == (1, True)
    assert seen["mine"] == threading.current_thread().name
    assert seen["other"].startswith("memvault-query-")


def test_with_every_worker_busy_the_other_half_is_taken_back_not_waited_for():
    release = threading.Event()
    started = [threading.Event() for _ in range(2)]
    blockers = [workers.pool().submit(lambda e=e: (e.set(), release.wait(10))) for e in started]
    try:
        assert all(e.wait(5) for e in started)
        ran_in = []
        other, _ = workers.beside(lambda: ran_in.append(threading.current_thread().name) or "done", lambda: None)
        assert other == "done" and ran_in == [threading.current_thread().name]
    finally:
        release.set()
    assert all(b.result(5) for b in blockers)


def test_an_error_in_either_half_reaches_the_caller():
    with pytest.raises(ZeroDivisionError):
        workers.beside(lambda: 1 / 0, lambda: None)
    with pytest.raises(KeyError):
        workers.beside(lambda: None, lambda: {}["x"])
