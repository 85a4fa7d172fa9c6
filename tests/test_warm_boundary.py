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
from warm_server import answering_once, serving


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


def test_a_scoped_source_recalls_through_the_warm_path_within_its_scope(vault, models, monkeypatch):
    """The warm process serves every source of this user from one open vault: a scoped agent's recall through it
    (a hook, the quick path) is filtered as the CLI's is, and a scope committed while the vault is open applies to
    the next call."""
    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    vault.facts.set("web/port", "The web server listens on port 8080.", source="user:t")
    ask = {"query": "which port does it listen on", "record": False, "mode": "keyword"}
    with serving(models):
        monkeypatch.setenv("MEMVAULT_SOURCE", "agent:web")
        assert {h["id"] for h in warm_client.call(str(vault.root), "recall", ask)["hits"]} == {"db/primary",
                                                                                             "web/port"}
        toml = vault.root / "memvault.toml"
        toml.write_text(toml.read_text() + '\n[scopes."agent:web"]\nread = ["facts/web/**"]\n')
        git(vault.root, "commit", "-qm", "scope agent:web", "--", "memvault.toml")
        for source in ({}, {"source": "agent:web"}):  # the caller's environment, or named in the call
            reply = warm_client.call(str(vault.root), "recall", {**ask, **source})
            assert [h["id"] for h in reply["hits"]] == ["web/port"], reply
        assert {h.id for h in Vault.open(vault.root, embedder_factory=models).recall(
            ask["query"], source="agent:web", mode="keyword", record_access=False)} == {"web/port"}


@pytest.mark.parametrize("reply", [b"[1, 2]\n", b'"ok"\n', b"null\n",
                                   b'{"ok": true, "bytes": 1000000000000000, "key": "%s"}\n',
                                   b'{"ok": true, "bytes": -5, "key": "%s"}\n',
                                   b'{"ok": true, "bytes": "many", "key": "%s"}\n'])
def test_a_reply_that_is_not_the_wire_format_is_daemon_unavailable(reply):
    """A header that is not a JSON object crashed the client with AttributeError (the full CLI's recall failed
    instead of loading the model itself); a payload length of a petabyte was allocated before the read."""
    with answering_once(reply), pytest.raises(DaemonUnavailable):
        channel.call({"op": "embed_query", "text": "x"}, 5.0)


def test_the_warm_process_reads_no_request_longer_than_a_frame(models, monkeypatch):
    """A request line was read whole, however long (a runaway client of this user grew the process that serves every
    vault until the system killed it); now a line past MAX_FRAME is refused, and the process goes on serving."""
    monkeypatch.setattr(channel, "MAX_FRAME", 1000)
    with serving(models):
        with channel.connect(5.0) as sock:
            sock.sendall(json.dumps({"op": "hello", "key": channel.install_key(), "pad": "x" * 5000}).encode() + b"\n")
            reply = json.loads(sock.makefile("rb").readline())
        assert not reply["ok"] and "more than 1000 bytes" in reply["error"]
        with channel.connect(5.0) as sock:
            sock.sendall(b"[1, 2]\n")
            assert not json.loads(sock.makefile("rb").readline())["ok"]
        assert channel.call({"op": "hello"}, 5.0)[0]["ok"]


def test_a_warm_vault_reads_this_hosts_local_toml_again_when_it_changes(vault, models):
    """The warm process read a vault's settings again only when memvault.toml changed: this host's local.toml
    (where `reindex --model`, a reranker or an extractor is set) was kept as first read until the process idled out."""
    from memvault.interfaces import warm
    from memvault.rules import config

    vaults = warm.WarmVaults(daemon.Models(), open_vault=lambda root: Vault.open(root, embedder_factory=models))
    try:
        assert vaults.get(str(vault.root)).vault.config.recall.rerank_candidates == 20
        local = config.local_path(vault.root / "memvault.toml")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text("[recall]\nrerank_candidates = 7\n")
        assert vaults.get(str(vault.root)).vault.config.recall.rerank_candidates == 7
    finally:
        vaults.close()
