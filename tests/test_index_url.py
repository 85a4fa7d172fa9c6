"""A teammate's push of ``[index] url`` naming a server they run: every host that pulled it connected there with
its PGPASSWORD, its questions and the text it publishes. A URL from the shared memvault.toml is used only once this
host accepted it (``reindex --accept-index-url``), and again after it changes; the environment's and local.toml's
are this host's own. A listening socket stands for the teammate's server: it counts who connects."""
from __future__ import annotations

import socket
import threading

import pytest

from memvault import Vault
from memvault.interfaces.cli import Context, cli
from memvault.rules.errors import SearchIndexError
from conftest import git

pytest.importorskip("psycopg")


class Listener:
    """A TCP server that accepts, counts and hangs up on every connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def rogue():
    listener = Listener()
    yield listener
    listener.sock.close()


def _pushed_url(vault: Vault, port: int) -> None:
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('backend = "sqlite"', f'backend = "postgres"\n'
                                                                   f'url = "postgresql://app@127.0.0.1:{port}/team"'))
    git(vault.root, "commit", "-qm", "the team index (a teammate's push)", "--", "memvault.toml")


def test_a_pushed_index_url_is_not_connected_to_until_this_host_accepts_it(strict_vault, models, rogue, runner,
                                                                          monkeypatch):
    monkeypatch.delenv("MEMVAULT_INDEX_URL", raising=False)
    monkeypatch.setenv("PGPASSWORD", "the-real-team-password")
    strict_vault.facts.set("db/primary", "The primary listens on 5432.", source="user:admin")
    _pushed_url(strict_vault, rogue.port)
    v = Vault.open(strict_vault.root, embedder_factory=models)
    result = v.recall("primary listens", mode="keyword")
    assert "5432" in result[0].text  # answered from this host's files
    said = " ".join(result.warnings)
    assert "has not accepted it" in said and f"127.0.0.1:{rogue.port}/team" in said and "accept-index-url" in said
    assert rogue.connections == 0

    out = runner.invoke(cli, ["--vault", str(v.root), "reindex", "--accept-index-url"], obj=Context(embedder_factory=models))
    assert "has not accepted" not in out.output
    assert rogue.connections > 0  # accepted: now it is this host's word to connect there


def test_a_changed_url_waits_for_the_word_again_and_the_hosts_own_url_needs_none(strict_vault, models, rogue,
                                                                                  monkeypatch):
    monkeypatch.delenv("MEMVAULT_INDEX_URL", raising=False)
    _pushed_url(strict_vault, rogue.port)
    v = Vault.open(strict_vault.root, embedder_factory=models)
    with pytest.raises(SearchIndexError, match="cannot connect"):  # accepted, then tried: nobody serves there
        v.reindex(accept_index_url=True, source="user:admin")
    assert rogue.connections > 0
    other = Listener()
    try:
        toml = v.root / "memvault.toml"
        toml.write_text(toml.read_text().replace(f":{rogue.port}/", f":{other.port}/"))
        v = Vault.open(v.root, embedder_factory=models)
        said = " ".join(v.recall("anything", mode="keyword").warnings)
        assert "has not accepted it" in said and f"127.0.0.1:{rogue.port}/team before" in said
        assert other.connections == 0

        monkeypatch.setenv("MEMVAULT_INDEX_URL", f"postgresql://app@127.0.0.1:{other.port}/team")
        v = Vault.open(v.root, embedder_factory=models)
        said = " ".join(v.recall("anything", mode="keyword").warnings)
        assert "has not accepted" not in said and other.connections > 0  # the environment is this host's own
    finally:
        other.sock.close()


def test_only_a_trusted_source_accepts_a_url(strict_vault, models, rogue, monkeypatch):
    from memvault.rules.errors import UntrustedSource

    monkeypatch.delenv("MEMVAULT_INDEX_URL", raising=False)
    _pushed_url(strict_vault, rogue.port)
    v = Vault.open(strict_vault.root, embedder_factory=models)
    with pytest.raises(UntrustedSource):
        v.reindex(accept_index_url=True, source="agent:helper")
    assert rogue.connections == 0


def test_a_committed_record_of_an_accepted_url_is_never_this_hosts_word(strict_vault, models, rogue, monkeypatch):
    """A teammate commits ``.memvault/index-url.json`` accepting the url they push; the person untracks the folder as
    the notice advises. It is left in the work tree, never moved into this host's state as an older memvault's."""
    import hashlib
    import json

    monkeypatch.delenv("MEMVAULT_INDEX_URL", raising=False)
    url = f"postgresql://app@127.0.0.1:{rogue.port}/team"
    old = strict_vault.root / ".memvault"
    old.mkdir()
    (old / "index-url.json").write_text(json.dumps({"sha256": hashlib.sha256(url.encode()).hexdigest(),
                                                    "shown": url}))
    git(strict_vault.root, "add", "-f", ".memvault")
    _pushed_url(strict_vault, rogue.port)
    git(strict_vault.root, "rm", "-r", "-q", "--cached", ".memvault")
    v = Vault.open(strict_vault.root, embedder_factory=models)
    assert not (v.state_dir / "index-url.json").exists() and (old / "index-url.json").is_file()
    assert "has not accepted it" in " ".join(v.recall("anything", mode="keyword").warnings)
    assert rogue.connections == 0


def test_an_index_url_in_this_hosts_local_toml_is_its_own_word(strict_vault, models, rogue, monkeypatch):
    monkeypatch.delenv("MEMVAULT_INDEX_URL", raising=False)
    toml = strict_vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('backend = "sqlite"', 'backend = "postgres"'))
    git(strict_vault.root, "commit", "-qm", "the team index", "--", "memvault.toml")
    local = strict_vault.state_dir / "local.toml"
    local.write_text(f'[index]\nurl = "postgresql://app@127.0.0.1:{rogue.port}/team"\n')
    v = Vault.open(strict_vault.root, embedder_factory=models)
    assert v.config.url_from == "this host's local.toml"
    said = " ".join(v.recall("anything", mode="keyword").warnings)
    assert "has not accepted" not in said and rogue.connections > 0
