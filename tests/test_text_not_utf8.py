"""A byte that is not UTF-8 on a command line reaches Python as a lone surrogate ('\\udcff'), and JSON's "\\ud800"
(an MCP tool's argument, an API caller's string) is one too: neither is text a file can hold. Every field that goes
into a fact or an episode refuses it in one line naming the field, before anything is written."""
from __future__ import annotations

import subprocess

import pytest

from memvault import Vault
from memvault.rules.errors import InvalidValue


def _tree(vault: Vault) -> str:
    return subprocess.run(["git", "-C", str(vault.root), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("args, field", [
    (("episode", "add", "disk \udcff full", "--source", "agent:x"), "text"),
    (("episode", "add", "disk full", "--tag", "a\udcffb"), "tags[0]"),
    (("fact", "set", "db/primary", "listens on \udcff 5432"), "text"),
    (("fact", "set", "db/primary", "listens on 5432", "--category", "ops\udcff"), "category"),
    (("fact", "set", "db/primary", "listens on 5432", "--tag", "\udcff"), "tags[0]"),
])
def test_a_byte_that_is_not_utf8_on_the_command_line_is_refused_naming_its_argument(invoke, vault, models,
                                                                                     args, field):
    before = _tree(vault)
    result = invoke(*args)
    assert result.exit_code == 1, result.output  # InvalidValue, as every bad value
    line = result.output.strip()
    assert "internal error" not in line and "\n" not in line
    assert f"{field}: not UTF-8 text" in line
    assert _tree(vault) == before
    assert not (vault.root / "facts" / "db").exists()


@pytest.mark.parametrize("call", [
    lambda v: v.episodes.append("half \ud800 a character", source="agent:x"),
    lambda v: v.episodes.append("ok", source="agent:x", meta={"host": "db\ud800"}),
    lambda v: v.facts.set("db/primary", "half \ud800 a character", source="user:admin"),
])
def test_a_lone_surrogate_from_json_is_refused_by_the_library(vault, models, call):
    with pytest.raises(InvalidValue, match="not UTF-8 text"):
        call(vault)
    assert _tree(vault) == ""
