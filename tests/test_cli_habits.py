"""CLI habits a newcomer brings from git and other tools: the vault named before or after the subcommand, --json
before or after it, and an option given to the wrong command named with the command it belongs to."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from memvault.interfaces.cli import cli
from memvault.interfaces.cli.base import Context, _reorder


@pytest.fixture
def run(vault, options):
    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:admin")

    def invoke(args, _vault=None):
        return CliRunner().invoke(cli, args, obj=Context(**options), prog_name="memvault")

    return invoke


@pytest.mark.parametrize("args", [
    ["recall", "database port", "--vault", "{v}", "-k", "1"],
    ["recall", "database port", "--vault={v}", "-k", "1"],
    ["--vault", "{v}", "recall", "database port", "-k", "1"],
    ["fact", "get", "db/primary", "--vault", "{v}"],
    ["agent", "context", "--vault", "{v}", "--prompt", "database port"],
])
def test_the_vault_may_be_named_before_or_after_the_subcommand(run, vault, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)  # not inside the vault: only --vault finds it
    result = run([a.replace("{v}", str(vault.root)) for a in args])
    assert result.exit_code == 0, result.output
    assert "5432" in result.output


def test_json_may_come_before_the_subcommand(run, vault):
    result = run(["--json", "--vault", str(vault.root), "fact", "get", "db/primary"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["key"] == "db/primary"


def test_an_option_of_another_command_says_where_it_belongs(run, vault):
    result = run(["--vault", str(vault.root), "recall", "x", "--category", "db"])
    assert result.exit_code == 2
    assert "memvault recall has no option --category; it belongs to 'memvault fact list', 'memvault fact set'" \
        in result.output


def test_nothing_after_a_double_dash_is_moved():
    assert _reorder(["proc", "run", "deploy", "--", "--vault", "x", "--json"]) == \
        ["proc", "run", "deploy", "--", "--vault", "x", "--json"]
    assert _reorder(["--json", "recall", "q", "--vault", "V"]) == ["--vault", "V", "recall", "q", "--json"]
