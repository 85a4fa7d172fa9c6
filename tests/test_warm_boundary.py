"""The warm path reviewed as another local process would attack it (2026-12-06): a warm process that hangs, a
vault moved or replaced under a warm process, frames that are not what the wire format says."""
from __future__ import annotations

import json
import shutil
import socket
import time

import pytest

from memvault import Vault
from memvault.interfaces import warm_client
from memvault.models import channel, daemon
from memvault.rules.errors import DaemonUnavailable
from conftest import git
from warm_server import serving


def test_a_vault_replaced_at_its_path_is_not_answered_from_the_old_one(tmp_path, models):
    """A warm process kept the vault it opened for a path: after ``mv vault old && git clone other vault`` its
    recall at that path answered from the moved vault's index and files."""
    first = Vault.init(tmp_path / "vault", embedder_factory=models)
    first.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    with serving(models):
        reply = warm_client.call(str(first.root), "recall", {"query": "primary database port", "record": False,
                                                             "mode": "keyword"})
        assert [h["id"] for h in reply["hits"]] == ["db/primary"]
        first.close()
        shutil.move(first.root, tmp_path / "moved")
        second = Vault.init(tmp_path / "vault", embedder_factory=models)
        second.facts.set("web/port", "The web server listens on port 8080.", source="user:t")
        second.close()
        reply = warm_client.call(str(second.root), "recall", {"query": "port", "record": False,
                                                              "mode": "keyword"})
        assert [h["id"] for h in reply["hits"]] == ["web/port"]


@pytest.fixture
def hung():
    """A socket at this install's name whose process never answers (stopped, deadlocked, swapped out): the kernel
    accepts the connection, nothing reads or replies."""
    with channel.opened_dir() as fd:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(channel.at(fd, channel.socket_name()))
    listener.listen(8)
    yield listener
    listener.close()


def test_a_hung_warm_process_is_given_up_on_in_seconds_not_minutes(hung, monkeypatch):
    """Asking whether a warm process holds the model (what a write asks before embedding what it changed, and the
    full CLI before starting one) waited CALL_TIMEOUT, three minutes, on a process that never answers."""
    started = time.monotonic()
    with pytest.raises(DaemonUnavailable):
        daemon.connect("all-MiniLM-L6-v2", None, start=False)
    assert time.monotonic() - started < daemon.PROBE_TIMEOUT + 2


def test_a_hung_warm_process_is_replaced_before_a_model_load_is_waited_for(hung, monkeypatch):
    """With start (the full CLI's recall once no process held the model), the load request waited three minutes on
    a process that never answers before one was started in its place."""
    starts = []

    def start(idle):
        starts.append(idle)
        raise DaemonUnavailable("no new process in this test")

    monkeypatch.setattr(daemon, "start", start)
    started = time.monotonic()
    with pytest.raises(DaemonUnavailable, match="no new process"):
        daemon.connect("all-MiniLM-L6-v2", None, start=True)
    assert time.monotonic() - started < daemon.PROBE_TIMEOUT + 2 and len(starts) == 1
